"""Gradient clipping's two passes: the sum of |x|^p of every gradient into one float64 total
(or their largest |x| for p = inf), and the in-place scaling. Arrays are contiguous, 1-d.

The total is summed in blocks of a fixed size, one partial each, and the partials are added
in order: threads take whole blocks (see _threads.py), so the total is the same however many
threads computed it."""
import math

import numpy as np
from numba import prange

from ._math import jit
from ._threads import parallel

_BLOCK = 1 << 14


@jit
def _block_squares(x, start, stop):
    """sum x^2 over x[start:stop] in four interleaved partial sums (a fixed order): one chain
    of dependent additions bound the default 2-norm by their latency, 0.8 ms of the GPT
    step."""
    a = b = c = d = 0.0
    whole = stop - (stop - start) % 4
    for i in range(start, whole, 4):
        v0, v1, v2, v3 = float(x[i]), float(x[i + 1]), float(x[i + 2]), float(x[i + 3])
        a += v0 * v0
        b += v1 * v1
        c += v2 * v2
        d += v3 * v3
    for i in range(whole, stop):
        v = float(x[i])
        a += v * v
    return (a + b) + (c + d)


@jit
def _block_powers(x, p, start, stop):
    """sum |x|^p over x[start:stop] (p = 1 and 2 without a power call; p = 0 counts the
    non-zeros), or max |x| for p = inf, min |x| for p = -inf; a nan makes it nan."""
    if p == math.inf or p == -math.inf:
        extreme = 0.0 if p == math.inf else math.inf
        for i in range(start, stop):
            a = abs(float(x[i]))
            further = a > extreme if p == math.inf else a < extreme
            extreme = a if further or a != a else extreme
        return extreme
    total = 0.0
    if p == 0.0:
        for i in range(start, stop):
            v = float(x[i])
            total += 1.0 if v != 0.0 else 0.0
            total = v if v != v else total
    elif p == 2.0:
        total = _block_squares(x, start, stop)
    elif p == 1.0:
        for i in range(start, stop):
            total += abs(float(x[i]))
    else:
        for i in range(start, stop):
            total += abs(float(x[i])) ** p
    return total


@parallel()
def add_powers(x, p, total):
    """total + sum |x|^p, or max(total, max |x|) for p = inf, min(total, min |x|) for
    p = -inf (see _block_powers). A nan anywhere makes the result nan."""
    blocks = (x.size + _BLOCK - 1) // _BLOCK
    partials = np.empty(blocks)
    for k in prange(blocks):
        partials[k] = _block_powers(x, p, k * _BLOCK, min(x.size, (k + 1) * _BLOCK))
    for k in range(blocks):
        part = partials[k]
        if p == math.inf:
            total = part if part > total or part != part else total
        elif p == -math.inf:
            total = part if part < total or part != part else total
        else:
            total += part
    return total


@parallel(rows=("x",))
def scale(x, factor):
    for i in prange(x.size):
        x[i] = x[i] * factor
