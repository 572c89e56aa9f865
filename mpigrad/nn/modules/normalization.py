"""torch.nn.modules.normalization's path to the same classes as mpigrad.nn."""
from ..normalization import (LayerNorm, GroupNorm, RMSNorm)  # noqa: F401
