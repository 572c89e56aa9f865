"""Gradient clipping's two passes: the sum of |x|^p of every gradient into one float64 total
(or their largest |x| for p = inf), and the in-place scaling. Arrays are contiguous, 1-d."""
import math

from ._math import jit


@jit
def add_powers(x, p, total):
    """total + sum |x|^p (p = 1 and 2 without a power call; p = 0 counts the non-zeros), or
    max(total, max |x|) for p = inf, min(total, min |x|) for p = -inf. A nan anywhere makes
    the result nan."""
    if p == math.inf:
        for i in range(x.size):
            a = abs(float(x[i]))
            total = a if a > total or a != a else total
        return total
    if p == -math.inf:
        for i in range(x.size):
            a = abs(float(x[i]))
            total = a if a < total or a != a else total
        return total
    if p == 0.0:
        for i in range(x.size):
            v = float(x[i])
            total += 1.0 if v != 0.0 else 0.0
            total = v if v != v else total
    elif p == 2.0:
        for i in range(x.size):
            v = float(x[i])
            total += v * v
    elif p == 1.0:
        for i in range(x.size):
            total += abs(float(x[i]))
    else:
        for i in range(x.size):
            total += abs(float(x[i])) ** p
    return total


@jit
def scale(x, factor):
    for i in range(x.size):
        x[i] = x[i] * factor
