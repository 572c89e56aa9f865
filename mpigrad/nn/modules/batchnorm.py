"""torch.nn.modules.batchnorm's path to the same classes as mpigrad.nn."""
from ..normalization import (BatchNorm1d, BatchNorm2d, SyncBatchNorm)  # noqa: F401
