"""How every compiled loop is built, and the vectorisable math they share.

`jit` is numba's njit with:

- `error_model="numpy"`: numba's default ("python") checks each division for a zero divisor
  to raise ZeroDivisionError, and that branch stopped loops from vectorising (a GELU forward
  took 1.5 ms against 0.18 ms);
- `fastmath=False`: no reassociation, so a result is the same run to run and follows the
  order written (`lanes_jit` allows reassociation in the row sums that need vector lanes);
- `cache=True`: compiled once per machine, loaded from disk by later processes, and by the
  processes running beside the one compiling it (`_cache.share`);
- `nogil=True`: a loop lets other threads run, as numpy's passes did (DDP's and RPC's
  threads keep communicating while backward computes);
- no `parallel=`: `_threads.parallel` makes a loop written with `prange` into a serial loop
  and a way to run it on threads, and picks one on each call.

`cache=True` needs a writable directory (numba tries NUMBA_CACHE_DIR, the package's
`__pycache__`, then the user's cache directory, e.g. ~/.cache/numba for a read-only
site-packages); where there is none, the loops compile in every process instead of failing.
A cached loop is stale once any file of this package changes (`_cache.py`).

pip's llvmlite has no vector math library, so `math.exp` and `math.erf` are scalar calls
that stop a loop from vectorising. `exp`, `exp_f32` and `normal_cdf_f32` here are arithmetic
and bit casts only, which LLVM vectorises. `exp` works in float64: a float32 kernel using it
widens each element, computes in float64 and rounds once when it stores. The `_f32` ones work
in float32 arithmetic, twice the lanes, for the loops whose cost is that math (GELU, the
exponentials of attention's tiles); their constants are np.float32, since a Python float
literal would widen the arithmetic to float64.
"""
import math
import warnings

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from . import _cache  # before any loop: keys their cache by the package

OPTIONS = dict(error_model="numpy", fastmath=False, nogil=True)
_uncached = []  # set once numba found no writable cache directory


def jit(function, **extra):
    """numba's dispatcher for `function` with OPTIONS (and `extra`), cached on disk when a
    directory is writable; it compiles (or loads) on its first call."""
    if not _uncached:
        try:
            return _cache.share(numba.njit(cache=True, **{**OPTIONS, **extra})(function))
        except RuntimeError as error:  # "cannot cache function ...: no locator available"
            if "no locator" not in str(error):
                raise
            _uncached.append(error)
            warnings.warn(f"mpigrad's compiled loops cannot be cached ({error}); they compile "
                          "in every process. Set NUMBA_CACHE_DIR to a writable directory.",
                          RuntimeWarning, stacklevel=2)
    return numba.njit(cache=False, **{**OPTIONS, **extra})(function)


def lanes_jit(function):
    """`jit` for a loop of sums that LLVM may reassociate, and so vectorise: each sum is
    then added in vector lanes (eight float64 lanes with AVX-512) and the lanes added at the
    end, as torch's row sums are. Written partial sums stay scalar: LLVM's vectoriser does
    not combine separate accumulators, and a row sum bound by one scalar addition per
    element made LayerNorm twice torch's time (four partial sums left BatchNorm, the
    gradients' norm and softmax two to five times theirs). The lane order is fixed by the
    compiled loop (it depends on the row's length, not its address), so a result is the same
    run to run and the same in the serial and threaded forms, which run the same loop;
    it may differ in the last bits between machines of different vector widths."""
    return jit(function, fastmath={"reassoc"})


@lanes_jit
def lanes_sum(row):
    """The row's sum in float64, added in vector lanes (see lanes_jit)."""
    total = 0.0
    for c in range(row.shape[0]):
        total += float(row[c])
    return total


def _bitcast(source, target, target_ir):
    """An intrinsic reinterpreting a value's bits as another type of the same width."""
    @intrinsic
    def cast(typingctx, value):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], target_ir)
        return target(source), codegen
    return cast


_double_from_bits = _bitcast(types.int64, types.float64, ir.DoubleType())
_bits_of_double = _bitcast(types.float64, types.int64, ir.IntType(64))
_float_from_bits = _bitcast(types.int32, types.float32, ir.FloatType())
_bits_of_float = _bitcast(types.float32, types.int32, ir.IntType(32))


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts: n * _LN2_HI is exact for |n| < 2**11
_LN2_LO = 1.90821492927058770002e-10
# Adding 1.5 * 2**52 rounds to an integer and leaves it in the low bits of the mantissa: the
# float-to-int64 conversion AVX2 lacks, done with an add and a bit cast.
_ROUNDER = 6755399441055744.0
_ROUNDER_BITS = 0x4338000000000000
_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(14))  # e**r's, lowest order first


@intrinsic
def multiply_add(typingctx, a, b, c):
    """a b + c, fused into one instruction where the CPU has one (LLVM's fmuladd: an FMA on
    x86-64 with FMA3 and on arm64, else a multiply and an add), in the widest of the three
    float types, as a b + c would promote them."""
    if not all(isinstance(value, types.Float) for value in (a, b, c)):
        return None
    widest = max((a, b, c), key=lambda value: value.bitwidth)

    def codegen(context, builder, signature, args):
        value_type = context.get_value_type(widest)
        function = builder.module.declare_intrinsic(
            "llvm.fmuladd", [value_type], ir.FunctionType(value_type, [value_type] * 3))
        return builder.call(function, [context.cast(builder, value, value_kind, widest)
                                       for value, value_kind in zip(args, (a, b, c))])
    return widest(a, b, c), codegen


@jit
def horner(coefficients, x):
    """coefficients[0] + coefficients[1] x + ... by Horner's rule from the highest, one
    multiply-add per coefficient, in the coefficients' own type (float32 ones keep float32
    arithmetic). The loop has a constant trip count, so it is unrolled and a vectorised
    caller stays vectorised. Fused: a vectorised loop of polynomials is bound by their chains
    of dependent steps (the out-of-order window holds a few iterations), and a multiply-add
    is half the chain of a multiply and an add: float32 exp over 64K elements in L2 51 -> 44
    us, and 39 with its range reduction fused too."""
    p = coefficients[-1]
    for k in range(len(coefficients) - 2, -1, -1):
        p = multiply_add(p, x, coefficients[k])
    return p


@jit
def exp(x):
    """e**x in float64 to about 1 ulp, vectorisable (no branches, no calls): x = n ln2 + r,
    |r| <= ln2 / 2, e**r by its Taylor series to r**13 (the rest is below 1e-17), 2**n made
    from its bits (as 2**(n-1) * 2, so that n = 1024 fits). Below -708 (where 2**n would be
    subnormal) the result is 0; above log(max double), inf; nan stays nan."""
    clamped = min(max(x, -708.0), 709.782712893384)
    shifted = multiply_add(clamped, _LOG2E, _ROUNDER)
    n = shifted - _ROUNDER
    r = multiply_add(-n, _LN2_LO, multiply_add(-n, _LN2_HI, clamped))
    p = horner(_TAYLOR, r)
    scale = _double_from_bits((_bits_of_double(shifted) - _ROUNDER_BITS + 1022) << 52)
    out = p * scale * 2.0
    out = 0.0 if x < -708.0 else out
    out = math.inf if x > 709.782712893384 else out
    return x if x != x else out


# float32 constants (a Python float literal would widen the arithmetic to float64).
_LOG2E_F32 = np.float32(_LOG2E)
_LN2_HI_F32 = np.float32(0.693359375)  # ln 2 in two parts: n * hi is exact for |n| < 2**9
_LN2_LO_F32 = np.float32(-2.12194440e-4)
_ROUNDER_F32 = np.float32(12582912.0)  # 1.5 * 2**23: adding it rounds to an integer
_ROUNDER_BITS_F32 = np.int32(0x4B400000)
_LOWEST_F32 = np.float32(-86.5)  # below, 0 (e**x < 3e-38)
_HIGHEST_F32 = np.float32(88.72)
_TAYLOR_F32 = tuple(np.float32(1.0 / math.factorial(n)) for n in range(8))


@jit
def exp_f32(x):
    """e**x of a float32 in float32 arithmetic (twice the lanes of `exp`, which works in
    float64), to about 2 ulp: x = n ln2 + r, |r| <= ln2 / 2, e**r by its Taylor series to r**7
    (the rest is below 1e-8), 2**n made from its bits. Vectorisable: no branches, no calls."""
    clamped = min(max(x, _LOWEST_F32), _HIGHEST_F32)
    shifted = multiply_add(clamped, _LOG2E_F32, _ROUNDER_F32)
    n = shifted - _ROUNDER_F32
    r = multiply_add(-n, _LN2_LO_F32, multiply_add(-n, _LN2_HI_F32, clamped))
    p = horner(_TAYLOR_F32, r)
    power = _float_from_bits((_bits_of_float(shifted) - _ROUNDER_BITS_F32 + np.int32(126))
                             << np.int32(23))
    out = p * power * np.float32(2.0)
    out = np.float32(0.0) if x < _LOWEST_F32 else out
    out = np.float32(np.inf) if x > _HIGHEST_F32 else out
    return x if x != x else out


_HALF_LN2 = 0.34657359027997264


@jit
def expm1(x):
    """e**x - 1 in float64 without the cancellation of `exp(x) - 1` near 0: there (|x| < ln2 /
    2) its Taylor series x (1 + x / 2 + ...) to x**13, whose rest is below an ulp; elsewhere
    exp(x) - 1, which loses at most a bit or two. Vectorisable (both are computed)."""
    small = x * horner(_TAYLOR[1:], x)
    return small if abs(x) < _HALF_LN2 else exp(x) - 1.0


_HALF_LN2_F32 = np.float32(_HALF_LN2)
_ONE_F32 = np.float32(1.0)


@jit
def expm1_f32(x):
    """expm1 of a float32 in float32 arithmetic: the series to x**7 below ln2 / 2, exp_f32(x) - 1
    above; a few ulps at most."""
    small = x * horner(_TAYLOR_F32[1:], x)
    return small if abs(x) < _HALF_LN2_F32 else exp_f32(x) - _ONE_F32


# log(1 + t) for 0 <= t <= 1 as 2 atanh(u), u = t / (2 + t) <= 1/3: the odd series
# 2 (u + u**3 / 3 + u**5 / 5 + ...), in u**2 <= 1/9, to the term below an ulp: softplus's
# log1p(exp(-|x|)), whose argument is in that range, with a division and no log call.
_ATANH_SERIES = tuple(2.0 / (2 * k + 1) for k in range(18))
_ATANH_SERIES_F32 = tuple(np.float32(2.0 / (2 * k + 1)) for k in range(9))


@jit
def log1p_unit(t):
    """log(1 + t) for a float64 t in [0, 1]."""
    u = t / (2.0 + t)
    return u * horner(_ATANH_SERIES, u * u)


@jit
def log1p_unit_f32(t):
    """log(1 + t) for a float32 t in [0, 1], in float32 arithmetic."""
    u = t / (np.float32(2.0) + t)
    return u * horner(_ATANH_SERIES_F32, u * u)


def by_precision(float32_version, float64_version):
    """One name for a float32 function and its float64 twin, for loops written once for both
    dtypes: a compiled call takes the float32 one for a float32 argument."""
    def either(x):
        raise TypeError(f"{float64_version.__name__} runs inside compiled loops only")

    @overload(either, jit_options=OPTIONS)
    def _either(x):
        chosen = float32_version if x == types.float32 else float64_version
        return lambda x: chosen(x)
    return either


any_exp = by_precision(exp_f32, exp)
any_expm1 = by_precision(expm1_f32, expm1)
any_log1p_unit = by_precision(log1p_unit_f32, log1p_unit)


@jit
def gaussian_f32(x):
    """exp(-x**2 / 2) of a float32, in float32 arithmetic."""
    return exp_f32(np.float32(-0.5) * (x * x))


# The standard normal CDF Phi in float32, in two pieces, each a least-squares fit (relative
# error weighted) to float64 values of erf and erfc:
# - |x| < 1: Phi(x) = 1/2 + x S(x**2), S of degree 5 (at most 7e-10 relative off);
# - |x| >= 1: Phi(-|x|) = t exp(-x**2 / 2) R(t), t = 1 / (1 + |x| / (2 sqrt 2)), R of
#   degree 9 (at most 5e-9 relative off), and Phi(|x|) = 1 - Phi(-|x|).
# The tail is never formed as 1 + erf: the cancellation of 1 + erf(x / sqrt 2) below x = -2
# (torch's float32 erf is 1.5e-7 absolute off, 5e-5 relative to Phi(-3)) does not arise,
# and Phi(-|x|) keeps a float32's relative precision down to where it underflows.
_PHI_CENTRE = tuple(np.float32(c) for c in (
    0.3989422917366028, -0.06649035960435867, 0.009973322041332722, -0.0011863253312185407,
    0.00011348116095177829, -7.65214008424664e-06))
_PHI_TAIL = tuple(np.float32(c) for c in (
    0.141047403216362, 0.14104734361171722, 0.12342054396867752, 0.08804921060800552,
    0.04319436475634575, -0.011392884887754917, 0.009368306957185268, -0.11872248351573944,
    0.12131708860397339, -0.037403035908937454))
_PHI_TAIL_SCALE = np.float32(0.3535533845424652)  # 1 / (2 sqrt 2)
_HALF_F32 = np.float32(0.5)


@jit
def normal_cdf_f32(x, gaussian):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2 of a float32, in float32 arithmetic, given
    `gaussian` = gaussian_f32(x) (GELU's backward needs it too, so it is taken once).
    Within a few float32 ulps of Phi everywhere; vectorisable (both pieces are computed and
    one is selected)."""
    u = x * x
    s = horner(_PHI_CENTRE, u)
    centre = _HALF_F32 + x * s
    a = abs(x)
    t = _ONE_F32 / (_ONE_F32 + _PHI_TAIL_SCALE * a)
    r = horner(_PHI_TAIL, t)
    lower = t * gaussian * r
    tail = lower if x < np.float32(0.0) else _ONE_F32 - lower
    return centre if a < _ONE_F32 else tail


def row_max(row):
    """The maximum of a float32 or float64 row (compiled loops only), nan if it holds a nan
    of either sign, as torch's amax and numpy's max. Compared as integers: a float's bits,
    with the magnitude bits of a negative one flipped, order as the floats do (a nan's key
    is put above all), and an integer maximum vectorises, where a float one (nan-aware)
    stayed scalar: (1024, 96) float32 rows, 12 us against numpy's 68 us; four scalar partial
    maxima took 197 us on (700, 1000) against 61."""
    raise TypeError("row_max runs inside compiled loops only")


def row_min(row):
    """The minimum, as row_max the maximum (a nan's key is put below all)."""
    raise TypeError("row_min runs inside compiled loops only")


def _ordered_extreme(bits_of, from_bits, integer, sign_shift, infinity_bits, largest):
    shift, magnitude = integer(sign_shift), integer((1 << sign_shift) - 1)
    infinity = integer(infinity_bits)  # a magnitude above it is a nan's
    lowest, highest = integer(-(1 << sign_shift)), integer((1 << sign_shift) - 1)
    nan_key, start = (highest, lowest) if largest else (lowest, highest)

    def impl(row):
        best = start
        for c in range(row.shape[0]):
            bits = bits_of(row[c])
            key = bits ^ ((bits >> shift) & magnitude)  # its own inverse
            key = nan_key if (bits & magnitude) > infinity else key
            further = key > best if largest else key < best
            best = key if further else best
        return from_bits(best ^ ((best >> shift) & magnitude))
    return impl


_EXTREMES = {(dtype, largest): _ordered_extreme(*kind, largest)
             for dtype, kind in (
                 (types.float32, (_bits_of_float, _float_from_bits, np.int32, 31, 0x7F800000)),
                 (types.float64, (_bits_of_double, _double_from_bits, np.int64, 63,
                                  0x7FF0000000000000)))
             for largest in (True, False)}


@overload(row_max, jit_options=OPTIONS)
def _row_max(row):
    return _EXTREMES[row.dtype, True]


@overload(row_min, jit_options=OPTIONS)
def _row_min(row):
    return _EXTREMES[row.dtype, False]
