"""`mpigrad.backends`: torch.backends' switches that scripts read or set. There is no CUDA,
MPS or cuDNN: their `is_available()` is False and their flags are kept but change nothing.
`mkldnn` is oneDNN, which the float32 convolutions run on where it is installed."""
from . import cuda, cudnn, mkldnn, mps  # noqa: F401
