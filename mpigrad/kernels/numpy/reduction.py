"""The longer numpy kernels of ops/reduction.py: sum, mean, amax and amin, logsumexp, the
masked softmax, scatter_along and the 1- and 2-norms (softmax and log_softmax are compiled
loops, softmax.py)."""
import math

import numpy as np

from ._compiled import COMPILED_FROM, loops
from .clip import total_norm


def _rows_pay(x, dtypes):
    """Whether the compiled rows take x: a C-contiguous array of one of `dtypes`, big enough
    to pay for the call."""
    return x.size >= COMPILED_FROM and x.dtype in dtypes and x.flags.c_contiguous


def _as_rows(x, dim, dtypes=(np.float32, np.float64)):
    """x as a (rows, C) matrix when `dim` (normalised axes, None for all) is its last
    dimensions and the compiled rows take x (_rows_pay); else None."""
    axes = range(x.ndim) if dim is None else dim
    kept = x.ndim - len(axes)
    if not _rows_pay(x, dtypes) or tuple(axes) != tuple(range(kept, x.ndim)):
        return None
    return x.reshape(math.prod(x.shape[:kept]), -1)


def _reduced_shape(shape, dim, keepdim):
    dims = range(len(shape)) if dim is None else dim
    if keepdim:
        return tuple(1 if d in dims else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in dims)


def _by_rows(loop, rows, shape, dim, keepdim, *parameters):
    out = np.empty(rows.shape[0], rows.dtype)
    getattr(loops("reduction"), loop)(rows, *parameters, out)
    return out.reshape(_reduced_shape(shape, dim, keepdim))


def _summed_rows(x, dim):
    """Sums take the compiled rows for float32 only: there each row is added in float64 and
    rounded once, nearer the exact sum than numpy's pairwise float32 one. A float64 row
    added in lanes gains no precision and loses numpy's pairwise bound (error growing with
    the row's length rather than its logarithm), and a long row is a whole array's sum."""
    return _as_rows(x, dim, (np.float32,))


def _per_channel_rows(x, dim):
    """x (N, C, *S) as (N C, prod S) rows when `dim` is every dimension but 1 (a convolution's
    bias gradient, (0, 2, 3)) and the compiled rows take x in float32; else None."""
    if (x.ndim < 3 or tuple(dim or ()) != (0,) + tuple(range(2, x.ndim))
            or not _rows_pay(x, (np.float32,))):
        return None
    return x.reshape(x.shape[0] * x.shape[1], -1)


def sum(x, dim, keepdim, dtype):  # noqa: A001  (the op's name)
    """Over the last dimensions of a big float32 array: one compiled pass, its rows added in
    float64 lanes (compiled/reduction.py). Over all but dimension 1: those rows' float64
    sums then added over the samples, rounded once (on the tutorial CNN's (64, 10, 24, 24)
    gradient 52 us with the op around it, numpy's strided float32 sum 73). Otherwise numpy's
    sum."""
    if dtype is None:
        rows = _summed_rows(x, dim)
        if rows is not None:
            return _by_rows("row_sums", rows, x.shape, dim, keepdim, 1.0)
        rows = _per_channel_rows(x, dim)
        if rows is not None:
            sums = np.empty(rows.shape[0])
            loops("reduction").row_sums(rows, 1.0, sums)
            out = sums.reshape(x.shape[:2]).sum(0).astype(np.float32)
            return out.reshape(_reduced_shape(x.shape, dim, keepdim))
    return np.sum(x, axis=dim, keepdims=keepdim, dtype=dtype)


def mean(x, dim, keepdim):
    """As `sum`, each row's sum divided by its length."""
    rows = _summed_rows(x, dim)
    if rows is None:
        return np.mean(x, axis=dim, keepdims=keepdim)
    return _by_rows("row_sums", rows, x.shape, dim, keepdim, float(rows.shape[1]))


def amax(x, dim, keepdim):
    """Over the last dimensions of a big float32 or float64 array, a compiled pass over the
    rows (nan if a row holds one); otherwise numpy's max."""
    rows = _as_rows(x, dim)
    if rows is None:
        return np.max(x, axis=dim, keepdims=keepdim)
    return _by_rows("row_maxima", rows, x.shape, dim, keepdim)


def amin(x, dim, keepdim):
    rows = _as_rows(x, dim)
    if rows is None:
        return np.min(x, axis=dim, keepdims=keepdim)
    return _by_rows("row_minima", rows, x.shape, dim, keepdim)


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
