"""The longer numpy kernels of ops/reduction.py: logsumexp, the masked softmax, scatter_along
and the 1- and 2-norms (softmax and log_softmax are compiled loops, softmax.py)."""
import numpy as np

from .clip import total_norm


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


def norm(x, p, dim, keepdim):
    """The p-norm (1 or 2) over the axes `dim` (a tuple, or None for all). A whole float32 or
    float64 array's 2-norm is one pass of gradient clipping's kernel (float64 lane sums, no
    squared copy: (64, 128, 256) float32 2.9 -> 0.3 ms); otherwise numpy's passes."""
    if p == 2 and dim is None and x.dtype in (np.float32, np.float64):
        out = total_norm([x], 2.0).astype(x.dtype)
        return out.reshape((1,) * x.ndim) if keepdim else out
    if p == 1:
        return np.sum(np.abs(x), axis=dim, keepdims=keepdim)
    return np.sqrt(np.sum(x * x, axis=dim, keepdims=keepdim))


def norm_backward(needs, g, ans, x, p, dim, keepdim):
    """g sign(x) for the 1-norm; g x / |x|, 0 where |x| = 0 (as torch), for the 2-norm: the
    rule's arithmetic in two passes for a whole-array norm, without its Tensor ops."""
    if not keepdim and dim is not None:
        g, ans = np.expand_dims(g, dim), np.expand_dims(ans, dim)
    if p == 1:
        return (g * np.sign(x),)
    if ans.size == 1:  # one norm: a scalar quotient
        scale = ans.reshape(())
        return (g * (x / scale) if scale != 0 else np.zeros_like(x) * g,)
    return (g * np.where(ans == 0, 0.0, x / np.where(ans == 0, 1.0, ans)).astype(x.dtype),)
