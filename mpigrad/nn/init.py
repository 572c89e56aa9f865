"""Parameter initialisation, with torch.nn.init's names and formulas.

Every function fills its tensor in place without recording a graph and returns it. Random
values come from mpigrad's default generator unless a `generator` is given, so
`mpigrad.manual_seed(s)` makes a model's initial weights reproducible.
"""
import math
import numbers
import warnings

import numpy as np

from .. import random
from ..autograd import grad_mode

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "zeros_",
           "ones_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_", "sparse_"]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity, param=None):
    """The factor that keeps activations' variance steady through `nonlinearity`."""
    if nonlinearity in _LINEAR:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, numbers.Real) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}; expected one of "
                     f"{', '.join(_LINEAR)}, tanh, relu, leaky_relu, selu")


def _calculate_fan_in_and_fan_out(tensor):
    """(fan_in, fan_out) of a weight laid out (out, in, *kernel), as torch defines them."""
    if tensor.ndim < 2:
        raise ValueError(f"fan in and fan out can not be computed for a tensor with fewer than "
                         f"2 dimensions (got shape {tuple(tensor.shape)})")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    with grad_mode.no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    with grad_mode.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Normal(mean, std) restricted to [a, b], by redrawing the values that fall outside."""
    if not a < b:
        raise ValueError(f"trunc_normal_: expected a < b, got a={a}, b={b}")
    values = random.normal_array(tensor.shape, mean, std, np.float64, generator)
    outside = (values < a) | (values > b)
    while outside.any():
        values[outside] = random.normal_array(int(outside.sum()), mean, std, np.float64,
                                              generator)
        outside = (values < a) | (values > b)
    with grad_mode.no_grad():
        return tensor.copy_(values)


def constant_(tensor, val):
    with grad_mode.no_grad():
        return tensor.fill_(val)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _empty(tensor):
    """torch warns, and leaves the tensor alone, when asked to initialise no elements."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-bound, bound), bound = gain * sqrt(3 / fan) (He et al.); `a` is leaky_relu's slope."""
    if _empty(tensor):
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std^2), std = gain / sqrt(fan)."""
    if _empty(tensor):
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


def eye_(tensor):
    """The identity matrix (ones on the diagonal of a 2-D tensor, rectangular allowed)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with grad_mode.no_grad():
        return tensor.copy_(np.eye(*tensor.shape, dtype=tensor.dtype))


def dirac_(tensor, groups=1):
    """A convolution weight (3-D to 5-D) that passes its input through: in each of `groups`
    groups, output channel d takes input channel d at the kernel's centre."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if tensor.shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = tensor.shape[0] // groups
    values = np.zeros(tensor.shape, tensor.dtype)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, tensor.shape[1])):
            values[(g * out_per_group + d, d) + centre] = 1
    with grad_mode.no_grad():
        return tensor.copy_(values)


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix, as Saxe et al.: the Q of the QR decomposition of a
    normal matrix, its signs fixed by R's diagonal so Q is uniformly (Haar) distributed, times
    `gain`; a tensor of more than 2 dimensions is its first dimension by the rest."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flattened = random.normal_array((rows, cols), 0.0, 1.0, np.float64, generator)
    if rows < cols:
        flattened = flattened.T
    q, r = np.linalg.qr(flattened)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with grad_mode.no_grad():
        return tensor.copy_((q * gain).reshape(tensor.shape))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """A 2-D matrix of N(0, std^2) values with a fraction `sparsity` of each column (rounded
    up) set to zero at random rows (Martens, 2010)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros_per_column = int(math.ceil(sparsity * rows))
    values = random.normal_array((rows, cols), 0.0, std, tensor.dtype, generator)
    for column in range(cols):
        values[random.permutation_array(rows, generator)[:zeros_per_column], column] = 0
    with grad_mode.no_grad():
        return tensor.copy_(values)


def _deprecated(new):
    """torch's old names without the underscore: the same function, with its warning."""
    old = new.__name__[:-1]

    def deprecated(*args, **kwargs):
        warnings.warn(f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new.__name__}`.",
                      FutureWarning, stacklevel=2)
        return new(*args, **kwargs)
    deprecated.__name__ = deprecated.__qualname__ = old
    deprecated.__doc__ = f"Deprecated: use `{new.__name__}`."
    return deprecated


uniform, normal, constant, eye, dirac, xavier_uniform, xavier_normal, kaiming_uniform, \
    kaiming_normal, orthogonal, sparse = map(
        _deprecated, (uniform_, normal_, constant_, eye_, dirac_, xavier_uniform_,
                      xavier_normal_, kaiming_uniform_, kaiming_normal_, orthogonal_, sparse_))
