"""Elementwise functions: each forward beside its derivative."""
import math

import numpy as np

from .core import Op

exp = Op("exp", np.exp, (lambda g, ans, x: g * ans,), saves="ans")
log = Op("log", np.log, (lambda g, ans, x: g / x,), saves="x")
sqrt = Op("sqrt", np.sqrt, (lambda g, ans, x: g / (2 * ans),), saves="ans")
sin = Op("sin", np.sin, (lambda g, ans, x: g * cos(x),), saves="x")
cos = Op("cos", np.cos, (lambda g, ans, x: -g * sin(x),), saves="x")
tanh = Op("tanh", np.tanh, (lambda g, ans, x: g * (1 - ans * ans),), saves="ans")
abs = Op("abs", np.abs, (lambda g, ans, x: g * sign(x),), saves="x")
sign = Op("sign", np.sign, (lambda g, ans, x: g * 0,))


def _sigmoid(x):
    # Split by sign so exp never overflows.
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1 / (1 + np.exp(-x[positive]))
    e = np.exp(x[~positive])
    out[~positive] = e / (1 + e)
    return out


sigmoid = Op("sigmoid", _sigmoid, (lambda g, ans, x: g * ans * (1 - ans),), saves="ans")

relu = Op("relu", lambda x: np.maximum(x, 0), (lambda g, ans, x: g * (ans > 0),), saves="ans")

# numpy has no erf; math.erf per element is exact, and GELU is not on any hot path here.
_erf_elementwise = np.frompyfunc(math.erf, 1, 1)
erf = Op("erf", lambda x: _erf_elementwise(x).astype(x.dtype),
         (lambda g, ans, x: g * (2 / math.sqrt(math.pi)) * exp(-x * x),), saves="x")


def gelu(x, approximate="none"):
    """torch's GELU: x * Phi(x), or its tanh approximation; built from primitives, so every
    derivative order is exact."""
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + tanh(inner))
    if approximate != "none":
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * x * (1 + erf(x * (1 / math.sqrt(2))))


def _in_range(x, min, max):
    inside = True
    if min is not None:
        inside = x >= min
    if max is not None:
        inside = inside & (x <= max) if min is not None else x <= max
    return inside


clamp_op = Op("clamp", lambda x, min, max: np.clip(x, min, max),
              (lambda g, ans, x, min, max: g * _in_range(x, min, max),), saves="x")


def clamp(x, min=None, max=None):
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' and 'max' must be given")
    return clamp_op(x, min=min, max=max)


def _tie_split(g, ans, a, b, mine_wins):
    # Where a == b the gradient is shared equally, as in torch.
    return where(a == b, g * 0.5, where(mine_wins, g, 0.0))


maximum = Op("maximum", np.maximum,
             (lambda g, ans, a, b: _tie_split(g, ans, a, b, a > b),
              lambda g, ans, a, b: _tie_split(g, ans, a, b, b > a)),
             saves="a b")

minimum = Op("minimum", np.minimum,
             (lambda g, ans, a, b: _tie_split(g, ans, a, b, a < b),
              lambda g, ans, a, b: _tie_split(g, ans, a, b, b < a)),
             saves="a b")

where = Op("where", np.where,
           (None,
            lambda g, ans, cond, x, y: where(cond, g, 0.0),
            lambda g, ans, cond, x, y: where(cond, 0.0, g)),
           saves="cond")

masked_fill = Op("masked_fill", lambda x, mask, value: np.where(mask, np.asarray(value, x.dtype), x),
                 (lambda g, ans, x, mask, value: where(mask, 0.0, g), None),
                 saves="mask")


# Rounding is piecewise constant: its gradient is zero wherever it exists, as torch defines it.
floor = Op("floor", np.floor, (lambda g, ans, x: g * 0,))
ceil = Op("ceil", np.ceil, (lambda g, ans, x: g * 0,))
_round = Op("round", lambda x, decimals: np.round(x, decimals),
            (lambda g, ans, x, decimals: g * 0,))


def round(x, decimals=0):
    """Half to even, as torch.round (and numpy) do."""
    return _round(x, decimals=decimals)
