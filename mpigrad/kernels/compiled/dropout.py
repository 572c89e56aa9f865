"""Dropout in one pass, its mask drawn inside the loop from a counter-based generator.

Element i keeps its value (scaled by 1 / (1 - p)) unless draw k = i // span says to drop it,
where draw k is SplitMix64's k-th output from `seed` (Steele, Lea and Flood, 2014: a
Weyl sequence seed + (k + 1) * gamma through a 64-bit finaliser). A draw is a function of
(seed, k) alone, so the backward draws the same mask again instead of storing it, and the loop
has no state to carry from one element to the next. Dropped when its top 53 bits fall below
`threshold` = ceil(p 2**53), so P(drop) = p to within 2**-53.

Integers are uint64 throughout: numba would turn a uint64 mixed with a signed integer into a
float64, hence the typed constants.
"""
import numpy as np

from ._math import jit

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)
_S11, _S27, _S30, _S31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)


@jit
def _draw(seed, k):
    z = seed + (np.uint64(k) + _ONE) * _GAMMA
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return (z ^ (z >> _S31)) >> _S11


@jit
def dropout(x, seed, threshold, span, scale, out):
    """out = x * scale where kept, x * 0 where dropped (so a nan stays nan, as in torch's
    x * mask); consecutive runs of `span` elements share a draw (whole channels)."""
    for i in range(x.size):
        factor = scale if _draw(seed, i // span) >= threshold else 0.0
        out[i] = x[i] * factor
