"""torch.nn.modules.fold's path to the same classes as mpigrad.nn."""
from ..rearrange import (Fold, Unfold)  # noqa: F401
