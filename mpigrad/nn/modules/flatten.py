"""torch.nn.modules.flatten's path to the same classes as mpigrad.nn."""
from ..flatten import (Flatten, Unflatten)  # noqa: F401
