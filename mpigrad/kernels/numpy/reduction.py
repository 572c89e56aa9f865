"""The longer numpy kernels of ops/reduction.py: logsumexp, the masked softmax and
scatter_along (softmax and log_softmax are compiled loops, softmax.py)."""
import numpy as np


def logsumexp(x, dim, keepdim):
    axis = dim  # normalized by the op
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdim else np.squeeze(out, axis=axis)


def scatter_along(g, indices, dim, shape):
    out = np.zeros(shape, dtype=g.dtype)
    if indices.shape[dim] == 1:
        np.put_along_axis(out, indices, g, axis=dim)
    else:
        # Repeated indices within a row must add up.
        grid = list(np.ogrid[tuple(slice(n) for n in indices.shape)])
        grid[dim] = indices
        np.add.at(out, tuple(grid), g)
    return out

def masked_softmax(x, keep, dim):
    # Masked positions (keep False) count as -inf. A row that is -inf everywhere (attention
    # with every key masked) gives zeros, as torch's _safe_softmax does, instead of the 0/0
    # NaNs of the plain softmax. Works in one fresh array, the output.
    e = np.where(keep, x, -np.inf) if keep is not None else None
    top = np.max(x if e is None else e, axis=dim, keepdims=True)
    dead = np.isneginf(top)
    any_dead = dead.any()
    if any_dead:
        top[dead] = 0
    e = np.subtract(x, top) if e is None else np.subtract(e, top, out=e)
    np.exp(e, out=e)
    total = np.sum(e, axis=dim, keepdims=True)
    if any_dead:
        total[dead] = 1
    e /= total
    return e
