"""torch.nn.utils' training-loop helpers: gradient clipping and flat parameter vectors."""
from .clip_grad import (clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_,  # noqa: F401
                        get_total_norm)
from .convert_parameters import parameters_to_vector, vector_to_parameters  # noqa: F401
from . import rnn  # noqa: F401
