"""Bilinear resampling of images (kernels/numpy/resampling.py), forward and its adjoint, one
pass each: along each output row, each output pixel from the four source pixels around it.

Positions come per axis as (first, second, weight of the second) arrays, torch's; the
arithmetic is torch's upsample_bilinear2d's, in its order: along the width first, then the
height, (1 - w) a + w b; the adjoint adds each output pixel's four shares in output order.
Threads take whole (sample, channel) planes.
"""
from numba import prange

from ._threads import parallel


@parallel(rows=("x", "out"))
def bilinear(x, rows_first, rows_second, rows_weight, cols_first, cols_second, cols_weight,
             out):
    """out (planes, OH, OW) from x (planes, H, W)."""
    one = x.dtype.type(1)
    for p in prange(x.shape[0]):
        plane, out_plane = x[p], out[p]
        for i in range(out.shape[1]):
            top, bottom = plane[rows_first[i]], plane[rows_second[i]]
            down = rows_weight[i]
            up = one - down
            line = out_plane[i]
            for j in range(out.shape[2]):
                right = cols_weight[j]
                left = one - right
                a, b = cols_first[j], cols_second[j]
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
            top, bottom = plane[rows_first[i]], plane[rows_second[i]]
            down = rows_weight[i]
            up = one - down
            line = grad[i]
            for j in range(g.shape[2]):
                right = cols_weight[j]
                left = one - right
                a, b = cols_first[j], cols_second[j]
                value = line[j]
                top[a] += up * left * value
                top[b] += up * right * value
                bottom[a] += down * left * value
                bottom[b] += down * right * value
