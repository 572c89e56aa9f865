"""LayerNorm and RMSNorm over the trailing `dims` dimensions: the numpy backend's kernels over
the compiled loops (kernels/compiled/normalization.py)."""
import numpy as np

from ._compiled import compute_dtype, loops


def _rows(x, dims):
    features = int(np.prod(x.shape[x.ndim - dims:], dtype=np.int64))
    dtype = compute_dtype(x.dtype)
    return np.ascontiguousarray(x, dtype).reshape(-1, features), dtype


def _per_feature(array, features, dtype, fill):
    if array is None:
        return np.full(features, fill, dtype)
    return np.ascontiguousarray(array, dtype).reshape(features)


def _finish(array, like):
    return array.reshape(like.shape).astype(like.dtype, copy=False)


def layer_norm(x, weight, bias, dims, eps):
    matrix, dtype = _rows(x, dims)
    features = matrix.shape[1]
    out = np.empty_like(matrix)
    loops("normalization").layer_norm(matrix, _per_feature(weight, features, dtype, 1),
                                      _per_feature(bias, features, dtype, 0), float(eps), out)
    return _finish(out, x)


def layer_norm_backward(needs, g, ans, x, weight, bias, dims, eps):
    matrix, dtype = _rows(x, dims)
    features = matrix.shape[1]
    dx = np.empty_like(matrix)
    dweight, dbias = np.zeros(features), np.zeros(features)
    loops("normalization").layer_norm_backward(
        np.ascontiguousarray(g, dtype).reshape(matrix.shape),
        matrix, _per_feature(weight, features, dtype, 1), float(eps), dx, dweight, dbias)
    return (_finish(dx, x), None if weight is None else _finish(dweight, weight),
            None if bias is None else _finish(dbias, bias))


def rms_norm(x, weight, dims, eps):
    matrix, dtype = _rows(x, dims)
    out = np.empty_like(matrix)
    loops("normalization").rms_norm(matrix, _per_feature(weight, matrix.shape[1], dtype, 1),
                                    float(eps), out)
    return _finish(out, x)


def rms_norm_backward(needs, g, ans, x, weight, dims, eps):
    matrix, dtype = _rows(x, dims)
    dx = np.empty_like(matrix)
    dweight = np.zeros(matrix.shape[1])
    loops("normalization").rms_norm_backward(
        np.ascontiguousarray(g, dtype).reshape(matrix.shape), matrix,
        _per_feature(weight, matrix.shape[1], dtype, 1), float(eps), dx, dweight)
    return _finish(dx, x), None if weight is None else _finish(dweight, weight)
