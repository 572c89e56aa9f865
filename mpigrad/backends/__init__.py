"""`mpigrad.backends`: torch.backends' switches that scripts read or set. There is no MPS or
cuDNN: `is_available()` is False and the cuDNN flags are kept but change nothing."""
from . import cudnn, mps  # noqa: F401
