"""Gradient clipping's two passes: the sum of |x|^p of every gradient into one float64 total
(or their largest |x| for p = inf), and the in-place scaling. Arrays are contiguous, 1-d.

The total is summed in blocks of a fixed size, one partial each, and the partials are added
in order: threads take whole blocks (see _threads.py), so the total is the same however many
threads computed it."""
import math

import numpy as np
from numba import prange

from ._math import jit, lanes_jit
from ._threads import parallel

_BLOCK = 1 << 14


@lanes_jit
def _squares(block):
    """sum x^2 over the block, added in float64 vector lanes (lanes_jit): one chain of
    dependent additions bound the default 2-norm by their latency, and four scalar partial
    sums were no faster than one (GPT's and the word LM's: 1.6 ms a step, now 0.27)."""
    total = 0.0
    for i in range(block.shape[0]):
        v = float(block[i])
        total += v * v
    return total


@jit
def _block_powers(block, p):
    """sum |x|^p over the block (p = 1 and 2 without a power call; p = 0 counts the
    non-zeros), or max |x| for p = inf, min |x| for p = -inf; a nan makes it nan. Blocks are
    views indexed from 0: numba then drops its negative-index test, which kept the loops
    from vectorising."""
    if p == math.inf or p == -math.inf:
        extreme = 0.0 if p == math.inf else math.inf
        for i in range(block.shape[0]):
            a = abs(float(block[i]))
            further = a > extreme if p == math.inf else a < extreme
            extreme = a if further or a != a else extreme
        return extreme
    if p == 2.0:
        return _squares(block)
    total = 0.0
    if p == 0.0:
        for i in range(block.shape[0]):
            v = float(block[i])
            total += 1.0 if v != 0.0 else 0.0
            total = v if v != v else total
    elif p == 1.0:
        for i in range(block.shape[0]):
            total += abs(float(block[i]))
    else:
        for i in range(block.shape[0]):
            total += abs(float(block[i])) ** p
    return total


@parallel()
def add_powers(x, p, total):
    """total + sum |x|^p, or max(total, max |x|) for p = inf, min(total, min |x|) for
    p = -inf (see _block_powers). A nan anywhere makes the result nan."""
    blocks = (x.size + _BLOCK - 1) // _BLOCK
    partials = np.empty(blocks)
    for k in prange(blocks):
        partials[k] = _block_powers(x[k * _BLOCK:(k + 1) * _BLOCK], p)
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
