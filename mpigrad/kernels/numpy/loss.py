"""mse_loss for the numpy backend: a mean or sum is one compiled pass each way
(compiled/loss.py) where numpy took a difference, its square and a sum forward, and four
passes back (the forward's sum for float32 only); reduction="none" stays numpy's, as do
small inputs and other dtypes."""
import math

import numpy as np

from ._compiled import COMPILED_FROM, compute_dtype, flat, loops, result


def _compiled(x, t):
    """Whether the loops serve: they read t element for element beside x (no broadcast and
    no bounds checks), so t must match x's shape and dtype; nn.functional's mse_loss passes
    only such pairs, a direct ops.mse_loss call may not."""
    return (x.size >= COMPILED_FROM and x.dtype in (np.float32, np.float64)
            and t.shape == x.shape and t.dtype == x.dtype)


def _summed_compiled(x, t):
    """As reduction.py's sums, the squares' compiled sum only for float32: added in float64
    it is exact to rounding there, while a float64 sum in lanes would lose numpy's pairwise
    error bound."""
    return _compiled(x, t) and x.dtype == np.float32


def mse_loss(x, t, reduction):
    if reduction == "none":
        return np.square(x - t)
    if _summed_compiled(x, t):
        total = loops("loss").squared_error_sum(flat(x), flat(t, x.dtype))
    else:
        d = x - t
        total = float(np.sum(d * d, dtype=np.float64))
    if reduction == "mean":
        total = total / x.size if x.size else math.nan
    return np.asarray(total, x.dtype)


def mse_loss_backward(needs, g, ans, x, t, reduction):
    """The input's gradient norm (x - t) g, norm = 2 (over the element count for the mean),
    as torch's; the target's is its negative."""
    norm = 2.0 / max(x.size, 1) if reduction == "mean" else 2.0
    if reduction != "none" and _compiled(x, t):
        work = compute_dtype(x.dtype)
        grad_x = np.empty(x.shape, work)
        loops("loss").scaled_difference(flat(x), flat(t, work), work(norm * float(g)),
                                        grad_x.reshape(-1))
        grad_x = result(grad_x, x.dtype)
    else:
        grad_x = (np.asarray(norm, x.dtype) * (x - t) * g).astype(x.dtype, copy=False)
    return grad_x if needs[0] else None, np.negative(grad_x) if needs[1] else None
