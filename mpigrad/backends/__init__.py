"""`mpigrad.backends`: torch.backends' switches that scripts read or set. There is no CUDA,
MPS or cuDNN: `is_available()` is False and the flags are kept but change nothing.

Also torch's float32 matmul precision (`mpigrad.set_float32_matmul_precision`), which GPT
trainers set at their top. It is a permission, not a demand: 'high' and 'medium' let a
backend compute float32 products with less internal precision; mpigrad's always run at full
float32 precision, as torch's own CPU kernels do for 'high'."""
import warnings

from . import cuda, cudnn, mps  # noqa: F401

_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision):
    """As torch's: a str; an unknown one warns and changes nothing; 'high' and 'medium' turn
    `backends.cuda.matmul.allow_tf32` on and 'highest' off, as in torch."""
    if not isinstance(precision, str):
        raise RuntimeError(f"set_float32_matmul_precision expects a str, but got "
                           f"{type(precision).__name__}")
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      f"set_float32_matmul_precision call has no effect.", UserWarning,
                      stacklevel=2)
        return
    _matmul_precision[0] = precision
    cuda.matmul.allow_tf32 = precision != "highest"


def get_float32_matmul_precision():
    return _matmul_precision[0]
