"""Dropout: the numpy backend's kernel over the compiled loop (kernels/compiled/dropout.py).
Linear in x, with a mask that is a function of (seed, position): the same kernel applied to
the gradient is the backward."""
import math

import numpy as np

from ._compiled import flat, fresh, loops, result


def _threshold(p):
    # p = 1 drops everything through a zero scale; the threshold only has to fit
    return np.uint32(min(math.ceil(p * 2.0 ** 32), 2 ** 32 - 1))


def dropout(x, p, seed, span):
    """x with each run of `span` consecutive elements (C order) dropped with probability p,
    the rest scaled by 1 / (1 - p) in x's dtype, as torch scales its mask."""
    out = fresh(x.shape, x.dtype)
    dtype = out.dtype.type
    scale = dtype(0) if p >= 1 else dtype(1) / dtype(1 - p)
    loops("dropout").dropout(flat(x), np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32),
                             _threshold(p), int(span), scale, out.reshape(-1))
    return result(out, x.dtype)


def dropout_backward(needs, g, ans, x, p, seed, span):
    return (dropout(g, p, seed, span),)
