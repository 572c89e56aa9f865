"""Elementwise functions: each forward beside its derivative.

Every Jacobian here is diagonal, so each gradient rule is also the op's tangent rule
(`elementwise=True`): the product with g and with t is the same expression.
"""
import math

import numpy as np

from .core import Op

exp = Op("exp", np.exp, (lambda g, ans, x: g * ans,), saves="ans", elementwise=True)
log = Op("log", np.log, (lambda g, ans, x: g / x,), saves="x", elementwise=True)
sqrt = Op("sqrt", np.sqrt, (lambda g, ans, x: g / (2 * ans),), saves="ans", elementwise=True)
sin = Op("sin", np.sin, (lambda g, ans, x: g * cos(x),), saves="x", elementwise=True)
cos = Op("cos", np.cos, (lambda g, ans, x: -g * sin(x),), saves="x", elementwise=True)
tanh = Op("tanh", np.tanh, (lambda g, ans, x: g * (1 - ans * ans),), saves="ans",
          elementwise=True)
abs = Op("abs", np.abs, (lambda g, ans, x: g * sign(x),), saves="x", elementwise=True)
sign = Op("sign", np.sign, (lambda g, ans, x: g * 0,), elementwise=True)


def _sigmoid(x):
    # torch's 1 / (1 + exp(-x)). Where exp(-x) overflows (x below about -709, -88 in float32)
    # the result is 0, as it should be; splitting by sign instead made masked copies that cost
    # ten times the arithmetic, and LSTMs call this on every gate at every step.
    with np.errstate(over="ignore"):
        e = np.exp(-x)
    e += 1
    return np.reciprocal(e, out=e)


sigmoid = Op("sigmoid", _sigmoid, (lambda g, ans, x: g * ans * (1 - ans),), saves="ans",
             elementwise=True)

relu = Op("relu", lambda x: np.maximum(x, 0), (lambda g, ans, x: g * (ans > 0),), saves="ans",
          elementwise=True)

# numpy has no erf, and GELU (every transformer's MLP) calls it on whole activations, so a
# Python call per element (math.erf) cost 50 ms per (16, 64, 512) call. These are the
# piecewise rational approximations of Sun's fdlibm (the coefficients are its published
# numbers; accurate to about 1 ulp in float64), evaluated region by region on arrays.
_ERF_SMALL = ((1.28379167095512558561e-01, -3.25042107247001499370e-01,
               -2.84817495755985104766e-02, -5.77027029648944159157e-03,
               -2.37630166566501626084e-05),
              (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
               5.08130628187576562776e-03, 1.32494738004321644526e-04,
               -3.96022827877536812320e-06))
_ERF_NEAR_ONE = ((-2.36211856075265944077e-03, 4.14856118683748331666e-01,
                  -3.72207876035701323847e-01, 3.18346619901161753674e-01,
                  -1.10894694282396677476e-01, 3.54783043256182359371e-02,
                  -2.16637559486879084300e-03),
                 (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
                  7.18286544141962662868e-02, 1.26171219808761642112e-01,
                  1.36370839120290507362e-02, 1.19844998467991074170e-02))
_ERFC_MIDDLE = ((-9.86494403484714822705e-03, -6.93858572707181764372e-01,
                 -1.05586262253232909814e+01, -6.23753324503260060396e+01,
                 -1.62396669462573470355e+02, -1.84605092906711035994e+02,
                 -8.12874355063065934246e+01, -9.81432934416914548592e+00),
                (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02,
                 4.34565877475229228821e+02, 6.45387271733267880336e+02,
                 4.29008140027567833386e+02, 1.08635005541779435134e+02,
                 6.57024977031928170135e+00, -6.04244152148580987438e-02))
_ERFC_TAIL = ((-9.86494292470009928597e-03, -7.99283237680523006574e-01,
               -1.77579549177547519889e+01, -1.60636384855821916062e+02,
               -6.37566443368389627722e+02, -1.02509513161107724954e+03,
               -4.83519191608651397019e+02),
              (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02,
               1.53672958608443695994e+03, 3.19985821950859553908e+03,
               2.55305040643316442583e+03, 4.74528541206955367215e+02,
               -2.24409524465858183362e+01))
_ERF_AT_ONE = 8.45062911510467529297e-01


def _horner(z, coefficients):
    """The polynomial with `coefficients` (lowest first) at z, in place: numpy's polyval
    allocates an array per coefficient, which made erf twice as slow."""
    out = z * coefficients[-1]
    out += coefficients[-2]
    for c in coefficients[-3::-1]:
        out *= z
        out += c
    return out


def _ratio(coefficients, z):
    numerator = _horner(z, coefficients[0])
    numerator /= _horner(z, coefficients[1])
    return numerator


def _erf_magnitude(a):
    """erf(a) for a = |x| >= 0 (float64 or float32). Every region's formula runs on the whole
    array and np.where picks: boolean gathers and scatters cost more than the arithmetic. Each
    formula sees its input clamped to its own region, because overflowing and denormal
    intermediates elsewhere would run several times slower."""
    inner = np.minimum(a, 1.25)
    small = inner + inner * _ratio(_ERF_SMALL, inner * inner)
    near_one = _ERF_AT_ONE + _ratio(_ERF_NEAR_ONE, inner - 1)
    outer = np.clip(a, 1.25, 6.0)
    inverse_square = 1 / (outer * outer)
    tail = _ratio(_ERFC_MIDDLE, inverse_square)
    np.copyto(tail, _ratio(_ERFC_TAIL, inverse_square), where=outer >= 1 / 0.35)
    # exp(-a*a) split as exp(-z*z) * exp((z - a)(z + a)), z = a with the low half of its
    # mantissa cleared, so z*z is exact and the product loses nothing.
    bits = np.uint64 if a.dtype == np.float64 else np.uint32
    z = (outer.view(bits) & bits(0xFFFFFFFF00000000 if bits is np.uint64 else 0xFFFFF000)
         ).view(a.dtype)
    tail += (z - outer) * (z + outer)
    out = 1 - np.exp(-z * z - 0.5625) * np.exp(tail) / outer
    # copyto with a mask: np.where's three-array select was the slowest step here.
    np.copyto(out, near_one, where=a < 1.25)
    np.copyto(out, small, where=a < 0.84375)
    np.copyto(out, 1, where=a >= 6)  # erf is 1 to working precision from there
    np.copyto(out, a, where=np.isnan(a))
    return out


def _erf(x):
    # float32 (and float16) inputs are computed in float32: the approximations hold there to
    # a few ulps of float32, at half the memory traffic of float64.
    values = np.asarray(x, dtype=np.float64 if x.dtype == np.float64 else np.float32)
    return np.copysign(_erf_magnitude(np.abs(values)), values).astype(x.dtype, copy=False)


erf = Op("erf", _erf, (lambda g, ans, x: g * (2 / math.sqrt(math.pi)) * exp(-x * x),),
         saves="x", elementwise=True)


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
              (lambda g, ans, x, min, max: g * _in_range(x, min, max),), saves="x",
              elementwise=True)


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
             saves="a b", elementwise=True)

minimum = Op("minimum", np.minimum,
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
