"""Bilinear resampling of images (kernels/numpy/resampling.py), forward and its adjoint, one
pass each: along each output row, each output pixel from the four source pixels around it.

Positions come per axis as (first, second, weight of the second) arrays, torch's; the
arithmetic is torch's upsample_bilinear2d's, in its order: along the width first, then the
height, (1 - w) a + w b; the adjoint adds each output pixel's four shares in output order.
Threads take whole (sample, channel) planes.
"""
from numba import prange

from ._math import jit
from ._threads import parallel


@jit
def _sources(first, second, weight, k, one):
    """Output position k's two source indices along an axis and their weights, 1 - w and w."""
    w = weight[k]
    return first[k], second[k], one - w, w


@parallel(rows=("x", "out"))
def bilinear(x, rows_first, rows_second, rows_weight, cols_first, cols_second, cols_weight,
             out):
    """out (planes, OH, OW) from x (planes, H, W)."""
    one = x.dtype.type(1)
    for p in prange(x.shape[0]):
        plane, out_plane = x[p], out[p]
        for i in range(out.shape[1]):
            h0, h1, up, down = _sources(rows_first, rows_second, rows_weight, i, one)
            top, bottom, line = plane[h0], plane[h1], out_plane[i]
            for j in range(out.shape[2]):
                a, b, left, right = _sources(cols_first, cols_second, cols_weight, j, one)
                line[j] = ((top[a] * left + top[b] * right) * up
                           + (bottom[a] * left + bottom[b] * right) * down)


@parallel(rows=("g", "out"))
def bilinear_adjoint(g, rows_first, rows_second, rows_weight, cols_first, cols_second,
                     cols_weight, out):
    """out (planes, H, W), zeros, += each output pixel's gradient g (planes, OH, OW) times its
    four weights, at its four source pixels (torch's order: (h0, w0), (h0, w1), (h1, w0),
    (h1, w1), output pixel after output pixel)."""
    one = g.dtype.type(1)
    for p in prange(g.shape[0]):
        grad, plane = g[p], out[p]
        for i in range(g.shape[1]):
            h0, h1, up, down = _sources(rows_first, rows_second, rows_weight, i, one)
            top, bottom, line = plane[h0], plane[h1], grad[i]
            for j in range(g.shape[2]):
                a, b, left, right = _sources(cols_first, cols_second, cols_weight, j, one)
                value = line[j]
                top[a] += up * left * value
                top[b] += up * right * value
                bottom[a] += down * left * value
                bottom[b] += down * right * value
