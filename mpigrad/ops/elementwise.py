"""Elementwise functions: each forward beside its derivative.

Every Jacobian here is diagonal, so each gradient rule is also the op's tangent rule
(`elementwise=True`): the product with g and with t is the same expression. The forwards of
sigmoid, erf and relu are longer kernels, in kernels/numpy/elementwise.py.
"""
import math

import numpy as np

from ..dtypes import get_default_dtype, is_floating_point, operands_result_type
from .core import Op


def torch_promoted(ufunc, to_float=False):
    """A binary ufunc computed in torch's result dtype (dtypes.operands_result_type), not
    numpy's: a float32 tensor with an int64 one, a float64 0-d one or an integer tensor with
    a Python float stays float32 (numpy answered float64). `to_float`: an integer result
    is the default float dtype (true division). Operands of one dtype skip the lookup."""
    def forward(a, b):
        if (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype
                and (not to_float or is_floating_point(a.dtype))):
            return ufunc(a, b)
        dtype = operands_result_type(a, b)
        if dtype is None:
            return ufunc(a, b)
        if to_float and not is_floating_point(dtype):
            dtype = get_default_dtype()
        return ufunc(a, b, dtype=dtype)
    forward.__name__ = ufunc.__name__
    return forward

exp = Op("exp", np.exp, (lambda g, ans, x: g * ans,), saves="ans", elementwise=True)
log = Op("log", np.log, (lambda g, ans, x: g / x,), saves="x", elementwise=True)
sqrt = Op("sqrt", np.sqrt, (lambda g, ans, x: g / (2 * ans),), saves="ans", elementwise=True)
sin = Op("sin", np.sin, (lambda g, ans, x: g * cos(x),), saves="x", elementwise=True)
cos = Op("cos", np.cos, (lambda g, ans, x: -g * sin(x),), saves="x", elementwise=True)
tanh = Op("tanh", np.tanh, (lambda g, ans, x: g * (1 - ans * ans),), saves="ans",
          elementwise=True)
abs = Op("abs", np.abs, (lambda g, ans, x: g * sign(x),), saves="x", elementwise=True)
sign = Op("sign", np.sign, (lambda g, ans, x: g * 0,), elementwise=True)


sigmoid = Op("sigmoid", None, (lambda g, ans, x: g * ans * (1 - ans),), saves="ans",
             elementwise=True)

relu = Op("relu", None, (lambda g, ans, x: g * (ans > 0),), saves="ans",
          elementwise=True)

erf = Op("erf", None, (lambda g, ans, x: g * (2 / math.sqrt(math.pi)) * exp(-x * x),),
         saves="x", elementwise=True)


# GELU and SiLU run as one fused loop each way (kernels/numpy/activations.py); their rules
# below, written with ops, serve higher-order gradients and tangents.
_SQRT1_2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_CUBIC = 0.044715


def _gelu_slope(x, approximate):
    if approximate == "tanh":
        t = tanh(_SQRT_2_OVER_PI * (x + _CUBIC * x * x * x))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (_SQRT_2_OVER_PI
                                                        * (1 + 3 * _CUBIC * x * x))
    return 0.5 * (1 + erf(x * _SQRT1_2)) + x * exp(-0.5 * x * x) * _INV_SQRT_2PI


_gelu = Op("gelu", None, (lambda g, ans, x, approximate: g * _gelu_slope(x, approximate),),
           saves="x", elementwise=True)


def _check_floating(name, x):
    if not is_floating_point(x.dtype):
        raise RuntimeError(f"{name}: expected a floating point tensor, got {x.dtype}")


def gelu(x, approximate="none"):
    """torch's GELU: x * Phi(x), or its tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    _check_floating("gelu", x)
    return _gelu(x, approximate=approximate)


def _silu_slope(x):
    s = sigmoid(x)
    return s * (1 + x * (1 - s))


_silu = Op("silu", None, (lambda g, ans, x: g * _silu_slope(x),), saves="x", elementwise=True)


def silu(x):
    """x * sigmoid(x)."""
    _check_floating("silu", x)
    return _silu(x)


def _in_range(x, min, max):
    inside = True
    if min is not None:
        inside = x >= min
    if max is not None:
        inside = inside & (x <= max) if min is not None else x <= max
    return inside


clamp_op = Op("clamp", lambda x, min, max: np.clip(x, min, max),
              (lambda g, ans, x, min, max: g * _in_range(x, min, max),), saves="x",
              elementwise=True,
              # torch's names: ClampBackward1 for number bounds, ClampBackward0 for tensors.
              grad_fn_name=lambda params: "ClampBackward0" if any(
                  hasattr(params[k], "shape") for k in ("min", "max")) else "ClampBackward1")


def clamp(x, min=None, max=None):
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' and 'max' must be given")
    return clamp_op(x, min=min, max=max)


def _tie_split(g, ans, a, b, mine_wins):
    # Where a == b the gradient is shared equally, as in torch.
    return where(a == b, g * 0.5, where(mine_wins, g, 0.0))


maximum = Op("maximum", torch_promoted(np.maximum),
             (lambda g, ans, a, b: _tie_split(g, ans, a, b, a > b),
              lambda g, ans, a, b: _tie_split(g, ans, a, b, b > a)),
             saves="a b", elementwise=True)

minimum = Op("minimum", torch_promoted(np.minimum),
             (lambda g, ans, a, b: _tie_split(g, ans, a, b, a < b),
              lambda g, ans, a, b: _tie_split(g, ans, a, b, b < a)),
             saves="a b", elementwise=True)

where = Op("where", np.where,
           (None,
            lambda g, ans, cond, x, y: where(cond, g, 0.0),
            lambda g, ans, cond, x, y: where(cond, 0.0, g)),
           saves="cond", elementwise=True)

masked_fill = Op("masked_fill", lambda x, mask, value: np.where(mask, np.asarray(value, x.dtype), x),
                 (lambda g, ans, x, mask, value: where(mask, 0.0, g), None),
                 saves="mask", elementwise=True)


# Rounding is piecewise constant: its gradient is zero wherever it exists, as torch defines it.
floor = Op("floor", np.floor, (lambda g, ans, x: g * 0,), elementwise=True)
ceil = Op("ceil", np.ceil, (lambda g, ans, x: g * 0,), elementwise=True)
_round = Op("round", lambda x, decimals: np.round(x, decimals),
            (lambda g, ans, x, decimals: g * 0,), elementwise=True)


def round(x, decimals=0):
    """Half to even, as torch.round (and numpy) do."""
    return _round(x, decimals=decimals)


rsqrt = Op("rsqrt", lambda x: 1 / np.sqrt(x), (lambda g, ans, x: g * (-0.5 * ans * ans * ans),),
           saves="ans", elementwise=True)

# Masking the triangle keeps or zeroes each element on its own: a diagonal Jacobian.
_tril = Op("tril", lambda x, diagonal: np.tril(x, diagonal),
           (lambda g, ans, x, diagonal: _tril(g, diagonal=diagonal),), elementwise=True)
_triu = Op("triu", lambda x, diagonal: np.triu(x, diagonal),
           (lambda g, ans, x, diagonal: _triu(g, diagonal=diagonal),), elementwise=True)


def _triangle(op, name, input, diagonal):
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    return op(input, diagonal=int(diagonal))


def tril(input, diagonal=0):
    """The lower triangle of the last two dimensions (on and below `diagonal`), rest zero."""
    return _triangle(_tril, "tril", input, diagonal)


def triu(input, diagonal=0):
    """The upper triangle of the last two dimensions (on and above `diagonal`), rest zero."""
    return _triangle(_triu, "triu", input, diagonal)


# Replaced entries are constants; torch passes the gradient only where x was finite.
_nan_to_num = Op("nan_to_num",
                 lambda x, nan, posinf, neginf: np.nan_to_num(x, nan=nan, posinf=posinf,
                                                              neginf=neginf),
                 (lambda g, ans, x, nan, posinf, neginf: where(np.isfinite(x._array), g, 0.0),),
                 saves="x", elementwise=True)


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (by default the dtype's
    largest and smallest finite values)."""
    return _nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)
