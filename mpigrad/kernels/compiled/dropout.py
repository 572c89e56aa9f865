"""Dropout in one pass, its mask drawn inside the loop from a counter-based generator.

Element i keeps its value (scaled by 1 / (1 - p)) unless draw k = i // span says to drop it.
Draw k is a hash of (seed, k): two rounds of a 32-bit integer finaliser (Wellons' lowbias32,
xorshift-multiply, bias about 0.17 of a random permutation's) over k's Weyl step mixed with
the seed's two halves. A draw is a function of (seed, k) alone, so the backward draws the same
mask again instead of storing it, and the loop carries nothing from one element to the next:
32-bit multiplies vectorise on AVX2 (64-bit ones do not, and a SplitMix64 draw cost 5x more).
Dropped when the draw is below `threshold` = ceil(p 2**32), so P(drop) = p to 2**-32.

Integers are typed uint32 at each step: numba widens a uint32 product to 64 bits, and would
turn a uint32 mixed with a signed integer into a float64.

Threads take elements (or whole runs of `span`), see _threads.py: no draw depends on another.
"""
import numpy as np
from numba import prange

from ._math import jit
from ._threads import parallel

_U = np.uint32
_WEYL = _U(0x9E3779B9)
_MIX1 = _U(0x7FEB352D)
_MIX2 = _U(0x846CA68B)
_S15, _S16 = _U(15), _U(16)


@jit
def _mix(h):
    h = _U(h ^ (h >> _S16))
    h = _U(h * _MIX1)
    h = _U(h ^ (h >> _S15))
    h = _U(h * _MIX2)
    return _U(h ^ (h >> _S16))


@jit
def _draw(seed_low, seed_high, k):
    first = _mix(_U(_U(_U(k) * _WEYL) + seed_low))
    return _mix(_U(first ^ _U(seed_high + _U(k >> 32))))


@parallel()
def dropout(x, seed_low, seed_high, threshold, span, scale, out):
    """out = x * scale where kept, x * 0 where dropped (so a nan stays nan, as in torch's
    x * mask); consecutive runs of `span` elements share a draw (whole channels)."""
    if span == 1:
        for i in prange(x.size):
            out[i] = x[i] * (scale if _draw(seed_low, seed_high, i) >= threshold else 0.0)
        return
    for k in prange(x.size // span):
        factor = scale if _draw(seed_low, seed_high, k) >= threshold else 0.0
        # Views indexed from 0: numba then drops its negative-index test, which kept the
        # loop from vectorising.
        run, out_run = x[k * span:(k + 1) * span], out[k * span:(k + 1) * span]
        for i in range(span):
            out_run[i] = run[i] * factor
