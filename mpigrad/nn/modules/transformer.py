"""torch.nn.modules.transformer's path to the same classes as mpigrad.nn."""
from ..transformer import (Transformer, TransformerEncoder, TransformerDecoder,  # noqa: F401
                           TransformerEncoderLayer, TransformerDecoderLayer)
