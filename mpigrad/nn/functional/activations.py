"""Activations: pointwise nonlinearities, softmax and log_softmax, and the gated ones (prelu,
glu)."""
import warnings

from ... import ops
from ...autograd import grad_mode
from ...ops.autocast import fused
from .. import _checks


def relu(input, inplace=False):
    return input.relu_() if inplace else ops.relu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    if not inplace:
        return ops.leaky_relu(input, negative_slope=negative_slope)
    if negative_slope < 0 and input.requires_grad and grad_mode.is_grad_enabled():
        raise RuntimeError("In-place leakyReLu backward calculation is triggered with a "
                           "negative slope which is not supported. Call the out-of-place "
                           "version (inplace=False) instead.")
    # The op whose gradient reads only the output, so overwriting the input is safe (with a
    # positive slope the output's sign is the input's).
    return ops.inplace(ops.leaky_relu_, input, negative_slope=negative_slope)


@fused()
def gelu(input, approximate="none"):
    return ops.gelu(input, approximate=approximate)


@fused()
def silu(input):
    return ops.silu(input)


def tanh(input):
    return ops.tanh(input)


def sigmoid(input):
    return ops.sigmoid(input)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """Softmax along `dim`. Without `dim`, torch's deprecated guess (with its warning): dim 0
    for 0-, 1- and 3-d input, else 1. `dtype` casts the input first."""
    input, dim = _cast(input, dtype), _softmax_dim("softmax", input, dim, _stacklevel)
    _check_softmax_input("softmax", input, dim)
    return ops.softmax(input, dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """Log-softmax along `dim`; `dim` and `dtype` as in `softmax`."""
    input, dim = _cast(input, dtype), _softmax_dim("log_softmax", input, dim, _stacklevel)
    _check_softmax_input("log_softmax", input, dim)
    return ops.log_softmax(input, dim)


def _softmax_dim(name, input, dim, stacklevel):
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. "
                  "Change the call to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if input.ndim in (0, 1, 3) else 1


def _check_softmax_input(name, input, dim):
    """Floating point only, as torch's kernels (named by whether dim is the last)."""
    last = input.ndim == 0 or dim % input.ndim == input.ndim - 1
    _checks.floating(f"{name}_lastdim_kernel_impl" if last else f"{name}_kernel_impl", input)


def _cast(input, dtype):
    return input if dtype is None else input.to(dtype)


# SELU's constants (Klambauer et al., 2017), to the digits torch uses.
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _pointwise(op, input, inplace, what, **params):
    _checks.floating(f"{what}_cpu", input)
    return ops.inplace(op, input, **params) if inplace else op(input, **params)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _pointwise(ops.hardtanh, input, inplace, "hardtanh", min_val=min_val, max_val=max_val)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def elu(input, alpha=1.0, inplace=False):
    return _pointwise(ops.elu, input, inplace, "elu", alpha=alpha, scale=1.0, input_scale=1.0)


def selu(input, inplace=False):
    return _pointwise(ops.elu, input, inplace, "elu", alpha=_SELU_ALPHA, scale=_SELU_SCALE,
                      input_scale=1.0)


def celu(input, alpha=1.0, inplace=False):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _pointwise(ops.elu, input, inplace, "elu", alpha=alpha, scale=1.0,
                      input_scale=1.0 / alpha)


def softplus(input, beta=1.0, threshold=20.0):
    return _pointwise(ops.softplus, input, False, "softplus", beta=beta, threshold=threshold)


def logsigmoid(input):
    return _pointwise(ops.log_sigmoid, input, False, "log_sigmoid_forward")


def hardsigmoid(input, inplace=False):
    return _pointwise(ops.hardsigmoid, input, inplace, "hardsigmoid")


def hardswish(input, inplace=False):
    return _pointwise(ops.hardswish, input, inplace, "hardswish")


def threshold(input, threshold, value, inplace=False):
    return _pointwise(ops.threshold, input, inplace, "threshold", threshold=threshold,
                      value=value)


def softsign(input):
    return input / (input.abs() + 1)


def mish(input, inplace=False):
    # In place, the gradient reads a copy of the input, which the write does not overwrite.
    source = input.clone() if inplace else input
    out = source * ops.tanh(softplus(source))
    return input.copy_(out) if inplace else out


def prelu(input, weight):
    """x where x > 0, else weight * x; weight has one entry, or one per channel (dim 1)."""
    if weight.numel() != 1:
        channels = input.shape[1] if input.ndim >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {weight.numel()} and channel size = "
                               f"{channels}.")
        weight = weight.reshape((channels,) + (1,) * (input.ndim - 2))
    return ops.where(input > 0, input, weight * input)


def glu(input, dim=-1):
    """The first half of `dim` gated by the sigmoid of the second half."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = input.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension "
                           f"{dim % input.ndim} is size {size}")
    first, second = ops.chunk(input, 2, dim)
    return first * ops.sigmoid(second)
