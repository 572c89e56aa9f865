"""torch.nn.modules.conv's path to the same classes as mpigrad.nn."""
from ..conv import (Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d)  # noqa: F401
