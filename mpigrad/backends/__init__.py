"""`mpigrad.backends`: torch.backends' switches that scripts read or set. There is no CUDA,
MPS or cuDNN: `is_available()` is False and the flags are kept but change nothing."""
from . import cuda, cudnn, mps  # noqa: F401
