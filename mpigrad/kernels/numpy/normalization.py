"""LayerNorm and RMSNorm over the trailing `dims` dimensions, and BatchNorm in training over
all but the channel dimension (1): the numpy backend's kernels over the compiled loops
(kernels/compiled/normalization.py). Each forward returns `(out, kept)`, the per-row or
per-channel statistics (float64) its fused backward reads."""
import math

import numpy as np

from ._compiled import compute_dtype, loops


def _rows(x, dims):
    features = math.prod(x.shape[x.ndim - dims:])
    dtype = compute_dtype(x.dtype)
    return np.ascontiguousarray(x, dtype).reshape(-1, features), dtype


def _per_feature(array, features, dtype, fill):
    if array is None:
        return np.full(features, fill, dtype)
    return np.ascontiguousarray(array, dtype).reshape(features)


def _finish(array, like):
    return array.reshape(like.shape).astype(like.dtype, copy=False)


def _gradient(array, like):
    return None if like is None else _finish(array, like)


def layer_norm(x, weight, bias, dims, eps):
    matrix, dtype = _rows(x, dims)
    rows, features = matrix.shape
    out = np.empty_like(matrix)
    mean, rstd = np.empty(rows), np.empty(rows)
    loops("normalization").layer_norm(matrix, _per_feature(weight, features, dtype, 1),
                                      _per_feature(bias, features, dtype, 0), float(eps), out,
                                      mean, rstd)
    return _finish(out, x), (mean, rstd)


def _norm_backward(g, matrix, weight, mean, rstd, with_bias):
    """dx and the weight's (and bias's) gradient of LayerNorm, or of RMSNorm (`mean`
    empty): the loop's per-chunk sums added in chunk order, in float64."""
    loop = loops("normalization")
    chunks = -(-matrix.shape[0] // loop.CHUNK_ROWS)
    dx = np.empty_like(matrix)
    partial_weight = np.empty((chunks, matrix.shape[1]), matrix.dtype)
    partial_bias = np.empty((chunks, matrix.shape[1] if with_bias else 0), matrix.dtype)
    loop.norm_backward(np.ascontiguousarray(g, matrix.dtype).reshape(matrix.shape), matrix,
                       weight, mean, rstd, dx, partial_weight, partial_bias)
    # numpy adds along a leading axis row after row: the chunks in order
    return dx, partial_weight.sum(0, np.float64), partial_bias.sum(0, np.float64)


def layer_norm_backward(needs, g, ans, x, weight, bias, dims, eps, kept):
    matrix, dtype = _rows(x, dims)
    dx, dweight, dbias = _norm_backward(g, matrix, _per_feature(weight, matrix.shape[1], dtype, 1),
                                        *kept, bias is not None)
    return _finish(dx, x), _gradient(dweight, weight), _gradient(dbias, bias)


def rms_norm(x, weight, dims, eps):
    matrix, dtype = _rows(x, dims)
    out = np.empty_like(matrix)
    rrms = np.empty(matrix.shape[0])
    loops("normalization").rms_norm(matrix, _per_feature(weight, matrix.shape[1], dtype, 1),
                                    float(eps), out, rrms)
    return _finish(out, x), rrms


def rms_norm_backward(needs, g, ans, x, weight, dims, eps, kept):
    matrix, dtype = _rows(x, dims)
    dx, dweight, _ = _norm_backward(g, matrix, _per_feature(weight, matrix.shape[1], dtype, 1),
                                    kept[:0], kept, False)
    return _finish(dx, x), _gradient(dweight, weight)


def _channels(x, dtype=None):
    """x (N, C, ...) as a contiguous (N, C, S) array of its compute dtype (or `dtype`)."""
    dtype = dtype or compute_dtype(x.dtype)
    spatial = math.prod(x.shape[2:])
    return np.ascontiguousarray(x, dtype).reshape(x.shape[0], x.shape[1], spatial), dtype


def batch_norm(x, weight, bias, eps, running):
    """Training BatchNorm: normalised by the batch's statistics per channel, which also move
    the running ones, `running` = (running_mean or None, running_var or None, momentum), in
    place: running = (1 - momentum) running + momentum batch, the variance unbiased."""
    cube, dtype = _channels(x)
    channels = cube.shape[1]
    out = np.empty_like(cube)
    mean, invstd, var = np.empty(channels), np.empty(channels), np.empty(channels)
    loops("normalization").batch_norm(cube, _per_feature(weight, channels, dtype, 1),
                                      _per_feature(bias, channels, dtype, 0), float(eps), out,
                                      mean, invstd, var)
    if running is not None:
        running_mean, running_var, momentum = running
        count = cube.shape[0] * cube.shape[2]
        if running_mean is not None:
            running_mean[...] = momentum * mean + (1 - momentum) * running_mean
        if running_var is not None:
            unbiased = var * (count / (count - 1))
            running_var[...] = momentum * unbiased + (1 - momentum) * running_var
    return _finish(out, x), (mean, invstd)


def batch_norm_backward(needs, g, ans, x, weight, bias, eps, running, kept):
    cube, dtype = _channels(x)
    channels = cube.shape[1]
    dx = np.empty_like(cube)
    dweight, dbias = np.empty(channels), np.empty(channels)
    loops("normalization").batch_norm_backward(
        _channels(g, dtype)[0], cube, _per_feature(weight, channels, dtype, 1), *kept, dx,
        dweight, dbias)
    return _finish(dx, x), _gradient(dweight, weight), _gradient(dbias, bias)
