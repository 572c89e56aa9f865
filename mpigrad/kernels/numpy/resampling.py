"""Bilinear resampling for the numpy backend: images (N, C, H, W) as (N C, H, W) planes over
the compiled loops (kernels/compiled/resampling.py), float16 and bfloat16 through float32.
`positions` is (rows, columns), each torch's (first, second, weight of the second) source
indices along its axis (nn/functional/vision.py)."""
import numpy as np

from ._compiled import compute_dtype, loops, result


def _arguments(positions, dtype):
    arguments = []
    for first, second, weight in positions:
        arguments += [np.ascontiguousarray(first, np.int64),
                      np.ascontiguousarray(second, np.int64),
                      np.ascontiguousarray(weight, dtype)]
    return arguments


def upsample_bilinear2d(x, positions):
    dtype = compute_dtype(x.dtype)
    n, c, h, w = x.shape
    out_size = (len(positions[0][0]), len(positions[1][0]))
    out = np.empty((n * c,) + out_size, dtype)
    loops("resampling").bilinear(np.ascontiguousarray(x, dtype).reshape(n * c, h, w),
                                 *_arguments(positions, dtype), out)
    return result(out.reshape((n, c) + out_size), x.dtype)


def upsample_bilinear2d_backward(g, positions, input_size):
    dtype = compute_dtype(g.dtype)
    n, c = g.shape[:2]
    out = np.zeros((n * c,) + tuple(input_size), dtype)
    loops("resampling").bilinear_adjoint(
        np.ascontiguousarray(g, dtype).reshape((n * c,) + g.shape[2:]),
        *_arguments(positions, dtype), out)
    return result(out.reshape((n, c) + tuple(input_size)), g.dtype)
