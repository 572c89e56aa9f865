"""Reductions and the softmax family; the longer forwards are in kernels/numpy/reduction.py."""
import builtins
import collections
import math

import numpy as np

from .. import dtypes
from ..tensor import Tensor
from .core import Op, named
from .elementwise import where


def normalize_dims(dim, ndim):
    """`dim` as a sorted tuple of non-negative axes (None means all)."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    # This module defines its own max/min/sum (torch's names), hence builtins here.
    rank = builtins.max(ndim, 1)
    out = []
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-rank}, {rank - 1}], but got {d})")
        out.append(d % rank)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {dim} appears multiple times in the list of dims")
    return tuple(sorted(out))


def _axis(dim, ndim):
    """A reduction's axes: None for all of them, which an empty list of dims also means (as
    in torch); a 0-d tensor's one dim (0 or -1) is no axis at all."""
    if dim is None or (not isinstance(dim, (int, np.integer)) and len(dim) == 0):
        return None
    dims = normalize_dims(dim, ndim)
    return dims if ndim else ()


def expand_reduced(g, shape, dim, keepdim):
    """Broadcast the gradient of a reduction back over the reduced dimensions."""
    if not keepdim and len(shape):
        g = g.reshape(tuple(1 if d in normalize_dims(dim, len(shape)) else s
                            for d, s in enumerate(shape)))
    return g.expand(shape)


# Forwards in kernels/numpy/reduction.py; dim arrives normalised (a tuple of axes, or None).
_sum = Op("sum", None,
          (lambda g, ans, x, dim, keepdim, dtype: expand_reduced(g, x.shape, dim, keepdim),),
          (lambda t, ans, x, dim, keepdim, dtype:
           _sum(t, dim=dim, keepdim=keepdim, dtype=dtype),),
          grad_fn_name=lambda params: _variant("SumBackward", params))


def _variant(name, params):
    # torch numbers a reduction's overloads: 0 over everything, 1 along given dims.
    return f"{name}{0 if params['dim'] is None else 1}"


def sum(x, dim=None, keepdim=False, dtype=None):
    return _sum(x, dim=_axis(dim, x.ndim), keepdim=keepdim, dtype=dtype)


def _count(shape, dim):
    return math.prod(shape[d] for d in normalize_dims(dim, len(shape)))


_mean = Op("mean", None,
           (lambda g, ans, x, dim, keepdim:
            expand_reduced(g, x.shape, dim, keepdim) / _count(x.shape, dim),),
           (lambda t, ans, x, dim, keepdim: _mean(t, dim=dim, keepdim=keepdim),),
           grad_fn_name=lambda params: _variant("MeanBackward", params))


def mean(x, dim=None, keepdim=False):
    if not dtypes.is_differentiable(x.dtype):
        raise RuntimeError(f"mean() needs a floating point tensor, got {x.dtype}; "
                           "convert with .float() first")
    return _mean(x, dim=_axis(dim, x.ndim), keepdim=keepdim)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 0 if unbiased is False else 1


_var = Op("var", lambda x, dim, keepdim, correction:
          np.var(x, axis=dim, ddof=correction, keepdims=keepdim),
          (lambda g, ans, x, dim, keepdim, correction:
           expand_reduced(g, x.shape, dim, keepdim) * 2 * (x - x.mean(dim, keepdim=True))
           / (_count(x.shape, dim) - correction),),
          (lambda t, ans, x, dim, keepdim, correction:
           (t * (x - x.mean(dim, keepdim=True))).sum(dim, keepdim=keepdim) * 2
           / (_count(x.shape, dim) - correction),),
          saves="x")


def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return _var(x, dim=_axis(dim, x.ndim), keepdim=keepdim,
                correction=_correction(unbiased, correction))


def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    """sqrt(var), with torch's gradient 0 where the variance is 0 (a constant slice), where
    sqrt's infinite slope times var's zero one would give nan."""
    v = var(x, dim, unbiased, keepdim, correction)
    constant = v == 0
    return named(where(constant, 0.0, where(constant, 1.0, v).sqrt()), "StdBackward0", x)


def _norm_grad(g, ans, x, p, dim, keepdim):
    if p == 1:
        return expand_reduced(g, x.shape, dim, keepdim) * x.sign()
    full = expand_reduced(ans, x.shape, dim, keepdim)
    # The 2-norm's gradient x/|x| is taken as 0 at |x| = 0, as torch does.
    return expand_reduced(g, x.shape, dim, keepdim) * where(full == 0, 0.0, x / where(full == 0, 1.0, full))


def _norm_tangent(t, ans, x, p, dim, keepdim):
    if p == 1:
        return (t * x.sign()).sum(dim, keepdim=keepdim)
    return where(ans == 0, 0.0, (t * x).sum(dim, keepdim=keepdim) / where(ans == 0, 1.0, ans))


# Forward and fused backward in kernels/numpy/reduction.py.
_norm = Op("norm", None, (_norm_grad,), (_norm_tangent,), saves="x ans",
           grad_fn_name="LinalgVectorNormBackward0")


def norm(x, p=2, dim=None, keepdim=False):
    if p == "fro":
        p = 2
    if p not in (1, 2):
        raise ValueError(f"norm supports p=1, p=2 and 'fro', got {p!r}")
    return _norm(x, p=p, dim=_axis(dim, x.ndim), keepdim=keepdim)


def _extreme_grad(g, ans, x, dim, keepdim):
    # Ties share the gradient equally (torch's amax/amin and full max/min).
    hit = x == expand_reduced(ans, x.shape, dim, keepdim)
    return expand_reduced(g, x.shape, dim, keepdim) * hit / hit.sum(dim, keepdim=True)


def _extreme_tangent(t, ans, x, dim, keepdim):
    # The mean of the tangents where the extreme is reached (torch's rule for ties).
    hit = x == expand_reduced(ans, x.shape, dim, keepdim)
    return (t * hit).sum(dim, keepdim=keepdim) / hit.sum(dim, keepdim=keepdim)


# Forwards in kernels/numpy/reduction.py; dim arrives normalised, as sum's.
_amax = Op("amax", None, (_extreme_grad,), (_extreme_tangent,), saves="x ans")
_amin = Op("amin", None, (_extreme_grad,), (_extreme_tangent,), saves="x ans")


def amax(x, dim=None, keepdim=False):
    return _amax(x, dim=_axis(dim, x.ndim), keepdim=keepdim)


def amin(x, dim=None, keepdim=False):
    return _amin(x, dim=_axis(dim, x.ndim), keepdim=keepdim)


AminmaxResult = collections.namedtuple("AminmaxResult", ["min", "max"])


def aminmax(x, dim=None, keepdim=False):
    """(amin, amax) over `dim` (all by default)."""
    if x._array.size == 0 or (dim is not None and x.ndim and x.shape[dim] == 0):
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    return AminmaxResult(named(amin(x, dim, keepdim), "AminmaxBackward0", x),
                         named(amax(x, dim, keepdim), "AminmaxBackward0", x))


def nansum(x, dim=None, keepdim=False, dtype=None):
    """sum with nan counted as zero (and no gradient reaching a nan)."""
    if not dtypes.is_floating_point(x.dtype):
        return sum(x, dim, keepdim, dtype)
    finite = where(x != x, Tensor.wrap(np.zeros((), x.dtype)), x)
    return named(sum(finite, dim, keepdim, dtype), "NansumBackward0", x)


def nanmean(x, dim=None, keepdim=False):
    """mean over the elements that are not nan."""
    if not dtypes.is_floating_point(x.dtype):
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex "
                           f"dtype but got {dtypes.torch_name(x.dtype)}")
    counted = Tensor.wrap((~np.isnan(x._array)).astype(x.dtype))  # x's dtype, as torch's
    return nansum(x, dim, keepdim) / sum(counted, dim, keepdim)


def _check_nonempty(x, what):
    if x._array.size == 0:
        raise RuntimeError(f"{what}(): expected a non-empty tensor")


def argmax(x, dim=None, keepdim=False):
    _check_nonempty(x, "argmax")
    return Tensor.wrap(np.asarray(np.argmax(x._array, axis=dim, keepdims=keepdim)))


def argmin(x, dim=None, keepdim=False):
    _check_nonempty(x, "argmin")
    return Tensor.wrap(np.asarray(np.argmin(x._array, axis=dim, keepdims=keepdim)))


MinMax = collections.namedtuple("MinMax", ["values", "indices"])


def _with_indices(x, dim, keepdim, pick):
    _check_nonempty(x, "max" if pick is argmax else "min")
    if x.ndim == 0:
        normalize_dims(dim, 1)  # 0 and -1 only
        values, indices = x.clone(), Tensor.wrap(np.zeros((), np.int64))
        return MinMax(named(values, "MaxBackward0" if pick is argmax else "MinBackward0", x),
                      indices)
    indices = pick(x, dim, keepdim=True)
    values = take_along_dim(x, indices, dim)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return MinMax(named(values, "MaxBackward0" if pick is argmax else "MinBackward0", x),
                  indices)


def max(x, dim=None, keepdim=False):
    """Full reduction without `dim`; with it, (values, indices) as in torch."""
    if dim is None:
        _check_nonempty(x, "max")
        return named(amax(x), "MaxBackward1", x)
    return _with_indices(x, dim, keepdim, argmax)


def min(x, dim=None, keepdim=False):
    if dim is None:
        _check_nonempty(x, "min")
        return named(amin(x), "MinBackward1", x)
    return _with_indices(x, dim, keepdim, argmin)


# softmax's Jacobian is symmetric: its tangent rule is its gradient rule.
_softmax_op = Op("softmax", None,
             (lambda g, ans, x, dim: ans * (g - (g * ans).sum(dim, keepdim=True)),),
             (lambda t, ans, x, dim: ans * (t - (t * ans).sum(dim, keepdim=True)),),
             saves="ans")

_log_softmax_op = Op("log_softmax", None,
                 (lambda g, ans, x, dim: g - ans.exp() * g.sum(dim, keepdim=True),),
                 (lambda t, ans, x, dim: t - (t * ans.exp()).sum(dim, keepdim=True),),
                 saves="ans")


_logsumexp_op = Op("logsumexp", None,
                   (lambda g, ans, x, dim, keepdim: expand_reduced(g, x.shape, dim, keepdim)
                    * (x - expand_reduced(ans, x.shape, dim, keepdim)).exp(),),
                   (lambda t, ans, x, dim, keepdim:
                    (t * (x - expand_reduced(ans, x.shape, dim, keepdim)).exp())
                    .sum(dim, keepdim=keepdim),),
                   saves="x ans")


def logsumexp(x, dim, keepdim=False):
    return _logsumexp_op(x, dim=_axis(dim, x.ndim), keepdim=keepdim)


def softmax(x, dim):
    return _softmax_op(x, dim=dim)


def log_softmax(x, dim):
    return _log_softmax_op(x, dim=dim)


scatter_along = Op("scatter_along", None,
                   (lambda g, ans, grad, indices, dim, shape: take_along_dim(g, indices, dim),
                    None),
                   (lambda t, ans, grad, indices, dim, shape:
                    scatter_along(t, indices, dim=dim, shape=shape),
                    None),
                   saves="indices")

_take_along = Op("take_along_dim",
                 lambda x, indices, dim: np.take_along_axis(x, indices, axis=dim),
                 (lambda g, ans, x, indices, dim: scatter_along(g, indices, dim=dim, shape=x.shape),
                  None),
                 (lambda t, ans, x, indices, dim: _take_along(t, indices, dim=dim), None),
                 saves="indices")


def take_along_dim(x, indices, dim):
    if isinstance(indices, Tensor) and indices.dtype.kind not in "iu":
        raise TypeError(f"take_along_dim: indices must be an integer tensor, got {indices.dtype}")
    return _take_along(x, indices, dim=dim)


def _reversed(x, dim):
    return x[(slice(None),) * (dim % x.ndim) + (slice(None, None, -1),)]


# d/dx_i of sum_{j<=k} x_j is 1 for every k >= i: the gradient is g summed from the end.
_cumsum = Op("cumsum", lambda x, dim: np.cumsum(x, axis=dim),
             (lambda g, ans, x, dim: _reversed(_cumsum(_reversed(g, dim), dim=dim), dim),),
             (lambda t, ans, x, dim: _cumsum(t, dim=dim),))


def cumsum(x, dim, dtype=None):
    if dtype is not None:
        x = x.to(dtype)
    (axis,) = normalize_dims(dim, x.ndim)
    return _cumsum(x, dim=axis) if x.ndim else x * 1


def prod(x, dim=None, keepdim=False, dtype=None):
    """The product along `dim` (of everything when None), built from multiplications of halves
    so its gradient is exact where some factors are zero, to any order (torch's prod rule
    special-cases zeros for the same reason)."""
    if dtype is not None:
        x = x.to(dtype)
    if dim is None:
        out = _product_along(x.reshape(-1), 0)
        return named(out.reshape((1,) * x.ndim) if keepdim else out, "ProdBackward0", x)
    (axis,) = normalize_dims(dim, x.ndim)
    if x.ndim == 0:
        return x * 1
    out = _product_along(x, axis)
    return named(out.unsqueeze(axis) if keepdim else out, "ProdBackward1", x)


def _product_along(x, dim):
    head = (slice(None),) * dim
    n = x.shape[dim]
    if n == 0:
        return Tensor.wrap(np.ones(tuple(s for d, s in enumerate(x.shape) if d != dim), x.dtype))
    if n == 1:
        return x.squeeze(dim)
    if n % 2:
        return _product_along(x[head + (slice(0, n - 1),)], dim) * x[head + (n - 1,)]
    return _product_along(x[head + (slice(0, n, 2),)] * x[head + (slice(1, n, 2),)], dim)


SortResult = collections.namedtuple("SortResult", ["values", "indices"])


def sort(x, dim=-1, descending=False, stable=False):
    """(values, indices) along `dim`; the values carry the gradient. Ties keep their order (a
    stable sort, which torch's `stable=True` guarantees and its default usually gives)."""
    (axis,) = normalize_dims(dim, builtins.max(x.ndim, 1))
    if x.ndim == 0:
        return SortResult(x * 1, Tensor.wrap(np.zeros((), np.int64)))
    keys = x._array
    if descending:
        # Negated keys keep equal values in their original order, as a descending stable sort
        # does; unsigned and bool values are widened first so negation cannot wrap.
        keys = -keys.astype(np.float64) if keys.dtype.kind in "bu" else -keys
    order = np.argsort(keys, axis=axis, kind="stable")
    indices = Tensor.wrap(order.astype(np.int64))
    return SortResult(named(take_along_dim(x, indices, axis), "SortBackward0", x), indices)


def argsort(x, dim=-1, descending=False, stable=False):
    """The indices that sort x along `dim` (sort's)."""
    return sort(x, dim, descending, stable).indices


def count_nonzero(x, dim=None):
    """How many elements are not zero, over `dim` (an int, a sequence, or all), as int64."""
    axis = None if dim is None else normalize_dims(dim, builtins.max(x.ndim, 1))
    if x.ndim == 0:
        axis = None
    return Tensor.wrap(np.asarray(np.count_nonzero(x._array, axis=axis), np.int64))


def topk(x, k, dim=-1, largest=True, sorted=True):
    """The `k` largest (or smallest) values along `dim` and their indices, largest first."""
    (axis,) = normalize_dims(dim, builtins.max(x.ndim, 1))
    size = x.shape[axis] if x.ndim else 1
    if not 0 <= k <= size:
        raise RuntimeError(f"selected index k out of range: k={k} for dimension {dim} of "
                           f"size {size}")
    values, indices = sort(x, axis, descending=largest)
    head = (slice(None),) * axis
    return SortResult(named(values[head + (slice(0, k),)], "TopkBackward0", x),
                      indices[head + (slice(0, k),)])


def _softmax_rule(t, ans, x, keep, dim):
    # Masked and dead positions have ans = 0, so softmax's rule gives them zero gradient and
    # zero tangent: the mask itself needs no rule.
    return ans * (t - (t * ans).sum(dim, keepdim=True))


masked_softmax = Op("_masked_softmax", None, (_softmax_rule, None),
                    (_softmax_rule, None), saves="ans", grad_fn_name="SafeSoftmaxBackward0")


def safe_softmax(x, dim):
    """torch._safe_softmax: softmax along dim, with zeros for rows that are -inf everywhere."""
    return masked_softmax(x, None, dim=dim)
