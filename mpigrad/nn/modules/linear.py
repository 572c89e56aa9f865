"""torch.nn.modules.linear's path to the same classes as mpigrad.nn."""
from ..linear import (Identity, Linear, NonDynamicallyQuantizableLinear, Bilinear)  # noqa: F401
