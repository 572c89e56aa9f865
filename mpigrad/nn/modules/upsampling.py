"""torch.nn.modules.upsampling's path to the same classes as mpigrad.nn."""
from ..upsampling import (Upsample, UpsamplingNearest2d, UpsamplingBilinear2d)  # noqa: F401
