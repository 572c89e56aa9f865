"""torch.nn.modules.pixelshuffle's path to the same classes as mpigrad.nn."""
from ..rearrange import (PixelShuffle, PixelUnshuffle)  # noqa: F401
