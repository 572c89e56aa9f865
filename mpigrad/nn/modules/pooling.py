"""torch.nn.modules.pooling's path to the same classes as mpigrad.nn."""
from ..pooling import (MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveMaxPool1d,  # noqa: F401
                       AdaptiveMaxPool2d, AdaptiveAvgPool1d, AdaptiveAvgPool2d)
