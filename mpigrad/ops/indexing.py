"""Writing by index (scatter, scatter_add, index_add), reordering (roll, flip), repeating
(repeat_interleave) and embedding lookups, each with torch's semantics.

The scatters are linear in the input and in the source together, so each tangent rule is the
op itself applied to the tangents, and each gradient is the matching read: what a scatter
wrote, `gather` reads back; what index_add added, `index_select` reads back.
"""
import numpy as np

from ..sparse import SparseTensor
from ..tensor import Tensor
from .core import Op, inplace
from .reduction import normalize_dims
from .shape import gather, index_select, index_scatter, pad


def _axis(dim, ndim):
    return normalize_dims(dim, ndim)[0]


def _positions(index, axis):
    """The full index tuple that puts element (i, j, ...) of `index` at position index[i, j, ...]
    along `axis` and at i, j, ... along the others."""
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return tuple(grid)


def _window(src, index):
    """The part of `src` that `index` reaches: torch reads src only where index has entries."""
    if np.ndim(src) == 0:
        return src
    return src[tuple(slice(0, n) for n in index.shape)]


def _scatter(x, index, src, dim, accumulate):
    out = x.copy()
    positions = _positions(index, dim)
    if accumulate:
        np.add.at(out, positions, _window(src, index))
    else:
        out[positions] = _window(src, index)
    return out


def _source_gradient(g, index, src, dim):
    """g read back where the scatter wrote, zero for source elements the index never reached."""
    read = gather(g, dim, Tensor(index))
    if read.shape == src.shape:
        return read
    widths = []
    for have, want in zip(reversed(read.shape), reversed(src.shape)):
        widths += [0, want - have]
    return pad(read, widths)


def _zeros_like(meta):
    return Tensor(np.zeros(meta.shape, meta.dtype))


_scatter_op = Op(
    "scatter",
    lambda x, index, src, dim, accumulate: _scatter(x, index, src, dim, accumulate),
    (lambda g, ans, x, index, src, dim, accumulate:
        g if accumulate else _scatter_op(g, index, 0.0, dim=dim, accumulate=False),
     None,
     lambda g, ans, x, index, src, dim, accumulate: _source_gradient(g, index, src, dim)),
    (lambda t, ans, x, index, src, dim, accumulate:
        t if accumulate else _scatter_op(t, index, 0.0, dim=dim, accumulate=False),
     None,
     lambda t, ans, x, index, src, dim, accumulate:
        _scatter_op(_zeros_like(x), index, t, dim=dim, accumulate=accumulate)),
    saves="index", grad_fn_name=lambda p: "ScatterAddBackward0" if p["accumulate"]
    else "ScatterBackward0")


def _check_scatter(name, x, dim, index, src):
    axis = _axis(dim, x.ndim)
    index = index._array if isinstance(index, Tensor) else np.asarray(index)
    if index.dtype != np.int64:
        raise RuntimeError(f"{name}(): Expected dtype int64 for index")
    if index.ndim != x.ndim and not (index.ndim <= 1 and x.ndim <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if isinstance(src, Tensor):
        if src.dtype != x.dtype:
            raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
        if src.ndim != index.ndim:
            raise RuntimeError("Index tensor must have the same number of dimensions as src "
                               "tensor")
        if any(i > s for i, s in zip(index.shape, src.shape)):
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than src "
                               f"{list(src.shape)} apart from dimension {axis}")
    if any(i > s for d, (i, s) in enumerate(zip(index.shape, x.shape)) if d != axis):
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self "
                           f"{list(x.shape)} apart from dimension {axis}")
    if index.size and (index.min() < -x.shape[axis] or index.max() >= x.shape[axis]):
        bad = index.max() if index.max() >= x.shape[axis] else index.min()
        raise RuntimeError(f"index {int(bad)} is out of bounds for dimension {axis} with size "
                           f"{x.shape[axis]}")
    return axis, np.where(index < 0, index + x.shape[axis], index)


def _scatter_arguments(name, input, dim, index, src, value, reduce):
    """(others, params) of the scatter op after torch's checks."""
    if src is None:
        src = value
    if src is None:
        raise TypeError(f"{name}() missing the src tensor or value")
    if reduce not in (None, "add"):
        raise NotImplementedError(f"{name}(reduce={reduce!r}): only reduce='add' is "
                                  "supported (torch deprecates 'multiply'; use scatter_reduce)")
    axis, index = _check_scatter(name, input, dim, index, src)
    if not isinstance(src, Tensor):
        src = np.asarray(src, dtype=input.dtype)
    return (index, src), {"dim": axis, "accumulate": reduce == "add" or name.startswith(
        "scatter_add")}


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    """torch.scatter: input with src's elements (or `value`) written at `index` along `dim`;
    `reduce='add'` adds instead of writing."""
    others, params = _scatter_arguments("scatter", input, dim, index, src, value, reduce)
    return _scatter_op(input, *others, **params)


def scatter_(input, dim, index, src=None, *, value=None, reduce=None):
    others, params = _scatter_arguments("scatter_", input, dim, index, src, value, reduce)
    return inplace(_scatter_op, input, *others, **params)


def scatter_add(input, dim, index, src):
    """torch.scatter_add: input with src's elements added at `index` along `dim`."""
    others, params = _scatter_arguments("scatter_add", input, dim, index, src, None, None)
    return _scatter_op(input, *others, **params)


def scatter_add_(input, dim, index, src):
    others, params = _scatter_arguments("scatter_add_", input, dim, index, src, None, None)
    return inplace(_scatter_op, input, *others, **params)


def _index_add(x, index, source, dim, alpha):
    out = x.copy()
    np.add.at(out, (slice(None),) * dim + (index,), source * alpha if alpha != 1 else source)
    return out


_index_add_op = Op(
    "index_add",
    _index_add,
    (lambda g, ans, x, index, source, dim, alpha: g, None,
     lambda g, ans, x, index, source, dim, alpha:
        index_select(g, dim, Tensor(index)) * alpha),
    (lambda t, ans, x, index, source, dim, alpha: t, None,
     lambda t, ans, x, index, source, dim, alpha:
        _index_add_op(_zeros_like(x), index, t, dim=dim, alpha=alpha)),
    saves="index")


def _index_add_arguments(input, dim, index, source, alpha):
    axis = _axis(dim, input.ndim)
    index = index._array if isinstance(index, Tensor) else np.asarray(index)
    if index.ndim > 1 or index.dtype.kind not in "iu":
        raise IndexError("index_add_(): Index is supposed to be a vector")
    if source.dtype != input.dtype:
        raise RuntimeError(f"index_add_(): self ({input.dtype}) and source ({source.dtype}) "
                           "must have the same scalar type")
    expected = input.shape[:axis] + (index.size,) + input.shape[axis + 1:]
    if source.shape != expected and not (source.ndim == 0 and index.size == 1):
        raise RuntimeError(f"index_add_(): Number of indices ({index.size}) should be equal to "
                           f"source.size(dim) ({source.shape[axis] if source.ndim else 1})"
                           if source.ndim == input.ndim else
                           "index_add_(): source and self must have the same dimensions")
    return (index.reshape(-1), source), {"dim": axis, "alpha": alpha}


def index_add(input, dim, index, source, *, alpha=1):
    """torch.index_add: input with alpha * source's slices added at the 1-D `index` along dim."""
    others, params = _index_add_arguments(input, dim, index, source, alpha)
    return _index_add_op(input, *others, **params)


def index_add_(input, dim, index, source, *, alpha=1):
    others, params = _index_add_arguments(input, dim, index, source, alpha)
    return inplace(_index_add_op, input, *others, **params)


_roll = Op("roll", lambda x, shifts, dims: np.roll(x, shifts, axis=dims),
           (lambda g, ans, x, shifts, dims: _roll(g, shifts=_negated(shifts), dims=dims),),
           (lambda t, ans, x, shifts, dims: _roll(t, shifts=shifts, dims=dims),))


def _negated(shifts):
    return tuple(-s for s in shifts) if isinstance(shifts, tuple) else -shifts


def roll(input, shifts, dims=None):
    """torch.roll: elements shifted along `dims` (the flattened tensor when None), wrapping."""
    if dims is None:
        if isinstance(shifts, (tuple, list)):
            if len(shifts) != 1:
                raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                                   "dims:0")
            shifts = shifts[0]
        return _roll(input, shifts=int(shifts), dims=None)
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:"
                           f"{len(dims)}")
    axes = tuple(_axis(d, input.ndim) for d in dims)
    return _roll(input, shifts=tuple(int(s) for s in shifts), dims=axes)


_flip = Op("flip", lambda x, dims: np.flip(x, dims).copy(),
           (lambda g, ans, x, dims: _flip(g, dims=dims),),
           (lambda t, ans, x, dims: _flip(t, dims=dims),))


def flip(input, dims):
    """torch.flip: the order of elements reversed along each of `dims` (a copy)."""
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    return _flip(input, dims=normalize_dims(dims, input.ndim))


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """torch.repeat_interleave: each element (or slice along `dim`) repeated `repeats` times
    in place; with only an integer tensor of counts, the indices repeated by those counts."""
    if repeats is None:
        counts = input._array if isinstance(input, Tensor) else np.asarray(input)
        return Tensor(np.repeat(np.arange(counts.size), counts))
    counts = repeats._array if isinstance(repeats, Tensor) else np.asarray(repeats)
    if counts.dtype.kind not in "iu":
        raise RuntimeError("repeats has to be Long tensor")
    if (counts < 0).any():
        raise RuntimeError("repeats can not be negative")
    if dim is None:
        input, axis = input.reshape(-1), 0
    else:
        axis = _axis(dim, input.ndim)
    length = input.shape[axis] if input.ndim else 1
    if counts.ndim > 1 or counts.size not in (1, length):
        raise RuntimeError("repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {counts.size} and input.size({axis}) = {length}")
    order = np.repeat(np.arange(length), counts.reshape(-1) if counts.size > 1 else int(counts))
    if output_size is not None and order.size != output_size:
        raise RuntimeError(f"allocated size does not match required size: output_size "
                           f"{output_size}, required {order.size}")
    return index_select(input if input.ndim else input.reshape(1), axis, Tensor(order))


def _embedding_gradient(g, ans, weight, indices, padding_idx, scale, sparse):
    """Each looked-up row's gradient (times its `scale`, with scale_grad_by_freq), added into
    its row of weight; padding_idx's row gets none. With `sparse`, the same sum as a sparse
    tensor of one entry per lookup, in lookup order, padding left out, as torch's."""
    if scale is not None:
        g = g * Tensor.wrap(scale)
    if sparse:
        flat = indices.reshape(-1).astype(np.int64)
        rows = g._array.reshape(flat.size, weight.shape[1])
        if padding_idx is not None:
            keep = flat != padding_idx
            flat, rows = flat[keep], rows[keep]
        return SparseTensor.make(flat.reshape(1, -1), np.array(rows), weight.shape,
                                 coalesced=flat.size <= 1)
    if padding_idx is not None:
        g = g * Tensor.wrap((indices != padding_idx)[..., None].astype(g.dtype))
    return index_scatter(g, index=indices, shape=weight.shape)


_embedding = Op(
    "embedding", lambda weight, indices, padding_idx, scale, sparse: weight[indices],
    (_embedding_gradient,),
    (lambda t, ans, weight, indices, padding_idx, scale, sparse:
        _embedding(t, indices=indices, padding_idx=None, scale=None, sparse=False),))


def embedding(weight, indices, padding_idx=None, scale=None, sparse=False):
    """weight's rows at the integer array `indices` (checked by the caller), as
    F.embedding's lookup: see _embedding_gradient for what flows back."""
    return _embedding(weight, indices=indices, padding_idx=padding_idx, scale=scale,
                      sparse=sparse)


def nonzero(x, as_tuple=False):
    """The indices of x's non-zero elements: an int64 (count, x.ndim) tensor, or with
    `as_tuple` one 1-d tensor per dimension (a 0-d x counts as one element along one)."""
    array = x._array
    if as_tuple:
        return tuple(Tensor.wrap(i.astype(np.int64)) for i in np.nonzero(np.atleast_1d(array)))
    return Tensor.wrap(np.argwhere(array).astype(np.int64))


def argwhere(x):
    """nonzero(x) as a (count, x.ndim) tensor."""
    return nonzero(x)
