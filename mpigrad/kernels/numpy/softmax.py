"""softmax, log_softmax and cross-entropy over the classes: the numpy backend's kernels over
the compiled loops (kernels/compiled/softmax.py)."""
import numpy as np

from ._compiled import compute_dtype, flat, loops, rows, unrows


def _along(loop, x, dim):
    matrix, shape = rows(x, dim)
    out = np.empty_like(matrix)
    loop(matrix, matrix.dtype == np.float64, out)
    return unrows(out, shape, dim, x)


def _along_backward(loop, g, ans, dim, *flags):
    y, shape = rows(ans, dim)
    out = np.empty_like(y)
    loop(rows(g, dim, y.dtype)[0], y, *flags, out)
    return (unrows(out, shape, dim, ans),)


def softmax(x, dim):
    return _along(loops("softmax").softmax, x, dim)


def log_softmax(x, dim):
    return _along(loops("softmax").log_softmax, x, dim)


def softmax_backward(needs, g, ans, x, dim):
    return _along_backward(loops("softmax").softmax_backward, g, ans, dim)


def log_softmax_backward(needs, g, ans, x, dim):
    in_float64 = compute_dtype(ans.dtype) == np.float64
    return _along_backward(loops("softmax").log_softmax_backward, g, ans, dim, in_float64)


def _class_weight(weight, classes, dtype):
    return (np.ones(classes, dtype) if weight is None
            else np.ascontiguousarray(weight, dtype))


def cross_entropy(x, target, weight, ignore_index, label_smoothing):
    """Per row of scores x (rows, C), the loss of class-index target (rows,); kept: each
    row's log-sum-exp as (max, log of the shifted sum), float64, which the backward reads."""
    dtype = compute_dtype(x.dtype)
    out = np.empty(x.shape[0], dtype)
    log_sum_exp = (np.empty(x.shape[0]), np.empty(x.shape[0]))
    loops("softmax").cross_entropy(np.ascontiguousarray(x, dtype), flat(target, np.int64),
                                   _class_weight(weight, x.shape[1], dtype), ignore_index,
                                   float(label_smoothing), dtype == np.float64, out,
                                   *log_sum_exp)
    return out.astype(x.dtype, copy=False), log_sum_exp


def cross_entropy_backward(needs, g, ans, x, target, weight, ignore_index, label_smoothing,
                           kept):
    dtype = compute_dtype(x.dtype)
    out = np.empty(x.shape, dtype)
    loops("softmax").cross_entropy_backward(
        flat(g, dtype), np.ascontiguousarray(x, dtype), flat(target, np.int64),
        _class_weight(weight, x.shape[1], dtype), ignore_index, float(label_smoothing),
        dtype == np.float64, *kept, out)
    return (out.astype(x.dtype, copy=False),)
