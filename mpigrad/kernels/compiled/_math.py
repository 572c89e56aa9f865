"""How every compiled loop is built, and the vectorisable math they share.

`jit` is numba's njit with:

- `error_model="numpy"`: numba's default ("python") checks each division for a zero divisor
  to raise ZeroDivisionError, and that branch stopped loops from vectorising (a GELU forward
  took 1.5 ms against 0.18 ms);
- `fastmath=False`: no reassociation, so a result is the same run to run and follows the
  order written;
- `cache=True`: compiled once per machine, loaded from disk by later processes;
- `nogil=True`: a loop lets other threads run, as numpy's passes did (DDP's and RPC's
  threads keep communicating while backward computes);
- no `parallel=`: `_threads.parallel` makes a loop written with `prange` into a serial and a
  threaded twin, and picks one on each call.

`cache=True` needs a writable directory (numba tries NUMBA_CACHE_DIR, the package's
`__pycache__`, then the user's cache directory, e.g. ~/.cache/numba for a read-only
site-packages); where there is none, the loops compile in every process instead of failing.
A cached loop is stale once any file of this package changes (`_cache.py`).

pip's llvmlite has no vector math library, so `math.exp` and `math.erf` are scalar calls
that stop a loop from vectorising. `exp` and `erf_f32` here are arithmetic, `floor` and a bit
cast only, which LLVM vectorises. They work in float64: the float32 kernels widen each
element, compute in float64 and round once when they store (so they are within float32's
rounding of the exact result; torch's own float32 kernels are a few ulps off). Python float
literals are float64 anyway; the float64 arithmetic is the choice, not an accident.
"""
import importlib.util
import math
import sys
import warnings

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from . import _cache  # noqa: F401  (before any loop: keys their cache by the package)

_SCIPY_BLAS = "scipy.linalg.cython_blas"


def _load_numba_tables():
    """Fill numba's tables of implementations now, as its first compile or cache load would,
    but without importing scipy.linalg: numba.np.arraymath imports it only to learn whether
    np.convolve/np.correlate may call BLAS, which no loop here does, and it was 0.4-0.8 s
    of a warm start (scipy.linalg pulls in numpy.f2py). The answer is put back to what the
    import would have said (scipy is there), and numba imports scipy.linalg itself when a
    function that uses BLAS is compiled."""
    if (_SCIPY_BLAS in sys.modules or "numba.np.arraymath" in sys.modules
            or importlib.util.find_spec("scipy") is None):
        cpu_target.target_context.refresh()  # nothing to spare
        return
    sys.modules[_SCIPY_BLAS] = None  # its import fails at once
    try:
        cpu_target.target_context.refresh()
    finally:
        if sys.modules.get(_SCIPY_BLAS, 0) is None:
            del sys.modules[_SCIPY_BLAS]
    from numba.np import arraymath  # imported by the refresh above; not at the top (see there)
    arraymath._HAVE_BLAS = True


_load_numba_tables()

OPTIONS = dict(error_model="numpy", fastmath=False, nogil=True)
_uncached = []  # set once numba found no writable cache directory


def jit(function, **extra):
    """numba's dispatcher for `function` with OPTIONS (and `extra`), cached on disk when a
    directory is writable; it compiles (or loads) on its first call."""
    if not _uncached:
        try:
            return numba.njit(cache=True, **OPTIONS, **extra)(function)
        except RuntimeError as error:  # "cannot cache function ...: no locator available"
            if "no locator" not in str(error):
                raise
            _uncached.append(error)
            warnings.warn(f"mpigrad's compiled loops cannot be cached ({error}); they compile "
                          "in every process. Set NUMBA_CACHE_DIR to a writable directory.",
                          RuntimeWarning, stacklevel=2)
    return numba.njit(cache=False, **OPTIONS, **extra)(function)


@intrinsic
def _double_from_bits(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _bits_of_double(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts: n * _LN2_HI is exact for |n| < 2**11
_LN2_LO = 1.90821492927058770002e-10
# Adding 1.5 * 2**52 rounds to an integer and leaves it in the low bits of the mantissa: the
# float-to-int64 conversion AVX2 lacks, done with an add and a bit cast.
_ROUNDER = 6755399441055744.0
_ROUNDER_BITS = 0x4338000000000000


@jit
def exp(x):
    """e**x in float64 to about 1 ulp, vectorisable (no branches, no calls): x = n ln2 + r,
    |r| <= ln2 / 2, e**r by its Taylor series to r**13 (the rest is below 1e-17), 2**n made
    from its bits (as 2**(n-1) * 2, so that n = 1024 fits). Below -708 (where 2**n would be
    subnormal) the result is 0; above log(max double), inf; nan stays nan."""
    clamped = min(max(x, -708.0), 709.782712893384)
    shifted = clamped * _LOG2E + _ROUNDER
    n = shifted - _ROUNDER
    r = (clamped - n * _LN2_HI) - n * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    scale = _double_from_bits((_bits_of_double(shifted) - _ROUNDER_BITS + 1022) << 52)
    out = p * scale * 2.0
    out = 0.0 if x < -708.0 else out
    out = math.inf if x > 709.782712893384 else out
    return x if x != x else out


# erf on [0, 4] as a Chebyshev series in t = z / 2 - 1 (degree 22; at most 8e-11 off),
# summed by Clenshaw's recurrence; beyond 4, erf is 1 to float32's precision (1 - 1.5e-8).
_ERF_CHEBYSHEV = np.array([
    0.7721829757612678, 0.3963414763677622, -0.2561704267949428, 0.11370266355467544,
    -0.024340027671520176, -0.007727253651955904, 0.008681788707319161,
    -0.002832392779894154, -0.00020979392726325086, 0.0005371537203884135,
    -0.00017101487638306105, -1.622768666383841e-05, 2.8101774632377747e-05,
    -6.482128814986139e-06, -1.515573039830805e-06, 1.1408058720101437e-06,
    -1.2412661837268857e-07, -8.770061046463509e-08, 3.200567614800876e-08,
    1.3569098115649172e-09, -3.153696004825937e-09, 4.933468126775709e-10,
    1.6921959968540102e-10])


@jit
def erf_f32(z):
    """erf(z) to 1e-10 absolute, enough for a float32 result (its ulp near 1 is 6e-8);
    vectorisable. Not for float64 results: those use math.erf."""
    a = min(abs(z), 4.0)
    t2 = a - 2.0  # 2t with t = a / 2 - 1
    b1 = 0.0
    b2 = 0.0
    for k in range(22, 0, -1):
        b1, b2 = t2 * b1 - b2 + _ERF_CHEBYSHEV[k], b1
    out = 0.5 * t2 * b1 - b2 + _ERF_CHEBYSHEV[0]
    return z if z != z else math.copysign(out, z)


@jit
def row_max(row):
    """The row's maximum; nan if the row holds a nan and nothing else above -inf. (A nan
    beside finite scores is skipped here, as a branch-free maximum does, and reaches the
    output through its exponential anyway.)"""
    a = b = c = d = -np.inf
    n = row.shape[0]
    whole = n - n % 4
    for j in range(0, whole, 4):
        x0, x1, x2, x3 = float(row[j]), float(row[j + 1]), float(row[j + 2]), float(row[j + 3])
        a = x0 if x0 > a else a
        b = x1 if x1 > b else b
        c = x2 if x2 > c else c
        d = x3 if x3 > d else d
    for j in range(whole, n):
        x = float(row[j])
        a = x if x > a else a
    top = max(max(a, b), max(c, d))
    if top == -np.inf:
        for j in range(n):
            if row[j] != row[j]:
                return np.nan
    return top


@jit
def row_sum(row):
    """The row's sum in float64, in four interleaved partial sums (a fixed order, so the
    same run to run; one chain of dependent additions would bound the loop by their
    latency)."""
    a = b = c = d = 0.0
    n = row.shape[0]
    whole = n - n % 4
    for j in range(0, whole, 4):
        a += float(row[j])
        b += float(row[j + 1])
        c += float(row[j + 2])
        d += float(row[j + 3])
    for j in range(whole, n):
        a += float(row[j])
    return (a + b) + (c + d)
