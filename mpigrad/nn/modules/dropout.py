"""torch.nn.modules.dropout's path to the same classes as mpigrad.nn."""
from ..dropout import (Dropout, Dropout1d, Dropout2d)  # noqa: F401
