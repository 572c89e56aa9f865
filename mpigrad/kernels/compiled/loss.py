"""Mean and summed squared error (mse_loss): the sum of (x - t)**2 in one pass, and the
input's gradient scale (x - t) in another. Each difference is taken in the inputs' dtype, as
torch's; the squares are added in float64 vector lanes (lanes_jit)."""
from numba import prange

from ._math import lanes_jit
from ._threads import parallel


@lanes_jit
def squared_error_sum(x, t):
    total = 0.0
    for i in range(x.size):
        d = x[i] - t[i]
        total += float(d * d)
    return total


@parallel(rows=("x", "t", "out"))
def scaled_difference(x, t, scale, out):
    """scale (x - t), scale in the arrays' dtype."""
    for i in prange(x.size):
        out[i] = scale * (x[i] - t[i])
