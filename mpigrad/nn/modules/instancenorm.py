"""torch.nn.modules.instancenorm's path to the same classes as mpigrad.nn."""
from ..normalization import (InstanceNorm1d, InstanceNorm2d)  # noqa: F401
