"""torch.nn.modules.module's path to the same classes as mpigrad.nn."""
from ..module import (Module)  # noqa: F401
