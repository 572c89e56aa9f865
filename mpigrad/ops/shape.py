"""Shape, indexing and joining ops. Most return numpy views that share the input's storage."""
import functools
import math
import warnings

import numpy as np

from ..tensor import Tensor
from .core import Op, inplace, named
from .reduction import normalize_dims


def _dim(dim, ndim):
    rank = max(ndim, 1)
    if type(dim) is int and -rank <= dim < rank:  # the common case, without the general checks
        return dim % rank
    (axis,) = normalize_dims(dim, rank)
    return axis


# A view's tangent is the same view of the input's tangent, sharing its storage as in torch.
# Its fused backward is the rule on the gradient's array: the rule's Tensor op cost a
# dispatch and a tensor, 5-6 us, and a GPT layer's backward runs eight of these views.
_reshape = Op("reshape", lambda x, shape: x.reshape(shape),
              (lambda g, ans, x, shape: g.reshape(x.shape),),
              (lambda t, ans, x, shape: _reshape(t, shape=shape),), view=True,
              grad_fn_name="ViewBackward0",
              backward=lambda needs, g, ans, x, shape: (np.reshape(g, x.shape),))


def reshape(x, shape):
    try:
        return _reshape(x, shape=tuple(map(int, shape)))
    except ValueError:
        raise RuntimeError(f"shape {tuple(shape)} is invalid for a tensor of size "
                           f"{x._array.size} (shape {x.shape})") from None


def flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = _dim(start_dim, x.ndim), _dim(end_dim, x.ndim)
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return reshape(x, x.shape[:start] + (-1,) + x.shape[end + 1:])


@functools.lru_cache(maxsize=256)
def _inverse(perm):
    """The permutation that undoes `perm` (a valid one: permute checked it)."""
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


# The gradient rule permutes back without permute()'s checks: a GPT's backward runs it four
# times a layer, where the checks and an argsort took 0.05-0.1 ms of each call.
_permute = Op("permute", lambda x, dims: x.transpose(dims),
              (lambda g, ans, x, dims: _permute(g, dims=_inverse(dims)),),
              (lambda t, ans, x, dims: _permute(t, dims=dims),), view=True,
              backward=lambda needs, g, ans, x, dims: (np.transpose(g, _inverse(dims)),))


def permute(x, dims):
    dims = tuple(d % max(x.ndim, 1) for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise RuntimeError(f"permute: dims {dims} are not a permutation of the {x.ndim} "
                           "dimensions of the tensor")
    return _permute(x, dims=dims)


def transpose(x, dim0, dim1):
    dims = list(range(x.ndim))
    a, b = _dim(dim0, x.ndim), _dim(dim1, x.ndim)
    dims[a], dims[b] = dims[b], dims[a]
    return named(_permute(x, dims=tuple(dims)), "TransposeBackward0", x)


def squeeze(x, dim=None):
    if dim is None:
        shape = tuple(s for s in x.shape if s != 1)
    else:
        dims = normalize_dims(dim, x.ndim)
        shape = tuple(s for d, s in enumerate(x.shape) if not (d in dims and s == 1))
    # torch names the three forms apart: all dims, one dim, a tuple of dims.
    variant = 0 if dim is None else 2 if isinstance(dim, (tuple, list)) else 1
    return named(reshape(x, shape), f"SqueezeBackward{variant}", x)


def unsqueeze(x, dim):
    ndim = x.ndim + 1
    if not -ndim <= dim < ndim:
        raise IndexError(f"unsqueeze: dim {dim} out of range for a {x.ndim}-d tensor")
    d = dim % ndim
    return named(reshape(x, x.shape[:d] + (1,) + x.shape[d:]), "UnsqueezeBackward0", x)


_expand = Op("expand", lambda x, shape: np.broadcast_to(x, shape),
             (lambda g, ans, x, shape: g,),
             (lambda t, ans, x, shape: _expand(t, shape=shape),), view=True)


def expand(x, sizes):
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes ({len(sizes)}) must be at least the "
                           f"tensor's number of dimensions ({x.ndim})")
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    for i, s in enumerate(x.shape):
        if s != 1 and s != shape[lead + i]:
            raise RuntimeError(f"expand: the size of dimension {i} ({s}) must match the "
                               f"expanded size ({shape[lead + i]}) or be 1")
    return _expand(x, shape=shape)


# ----------------------------------------------------------------------------- indexing
def _index_array(i):
    if isinstance(i, Tensor):
        return i._array
    if isinstance(i, list):
        return np.asarray(i)
    return i


def normalize_index(index):
    if isinstance(index, tuple):
        return tuple(_index_array(i) for i in index)
    return _index_array(index)


# The gradient of indexing: g added into zeros at the indexed places (kernels/numpy/indexing.py).
index_scatter = Op("index_scatter", None,
                   (lambda g, ans, grad, index, shape: getitem(g, index),),
                   (lambda t, ans, grad, index, shape:
                    index_scatter(t, index=index, shape=shape),))

def _indexing_name(index):
    """torch's node for `x[index]`: one integer selects, slices slice, anything else indexes."""
    selects = False
    for part in index if isinstance(index, tuple) else (index,):
        if type(part) is slice or part is None or part is Ellipsis:
            continue
        if not isinstance(part, (int, np.integer)):
            return "IndexBackward0"
        selects = True
    return "SelectBackward0" if selects else "SliceBackward0"


_getitem = Op("getitem", lambda x, index: x[index],
              (lambda g, ans, x, index: index_scatter(g, index=index, shape=x.shape),),
              (lambda t, ans, x, index: _getitem(t, index=index),), view=True,
              grad_fn_name=lambda params: _indexing_name(params["index"]))


def getitem(x, index):
    return _getitem(x, index=normalize_index(index))


def _index_put(x, value, index):
    out = x.copy()
    out[index] = value
    return out


def _index_put_fast(target, value, index):
    target[index] = value


index_put = Op("index_put", _index_put,
               (lambda g, ans, x, value, index: index_put(g, 0.0, index=index),
                lambda g, ans, x, value, index: getitem(g, index)),
               (lambda t, ans, x, value, index: index_put(t, 0.0, index=index),
                lambda t, ans, x, value, index:
                index_put(Tensor.wrap(np.zeros(ans.shape, t.dtype)), t, index=index)),
               inplace_fast=_index_put_fast)


def setitem_(x, index, value):
    return inplace(index_put, x, value, index=normalize_index(index))


# The overwritten value gets a zero gradient (not none), as in torch.
copy_from = Op("copy", lambda x, src: np.broadcast_to(src, x.shape).astype(x.dtype),
               (lambda g, ans, x, src: g * 0, lambda g, ans, x, src: g), elementwise=True,
               inplace_fast=lambda target, src: np.copyto(target, src, casting="unsafe"))

fill_with = Op("fill", lambda x, value: np.full_like(x, value),
               (lambda g, ans, x, value: g * 0,), elementwise=True,
               inplace_fast=lambda target, value: target.fill(value))


# ----------------------------------------------------------------------------- joining
def _cat_grad(i, g, ans, *xs, dim):
    start = int(np.sum([x.shape[dim] for x in xs[:i]], dtype=np.int64))
    index = (slice(None),) * dim + (slice(start, start + xs[i].shape[dim]),)
    return getitem(g, index)


def _placed_along(t, dim, start, total, ndim):
    """`t` padded with zeros along `dim` to `total`, starting at `start`: its part of a join."""
    widths = [(0, 0)] * ndim
    widths[dim] = (start, total - start - t.shape[dim])
    return _pad(t, widths=tuple(widths), value=0.0)


def _cat_tangent(i, t, ans, *xs, dim):
    start = int(np.sum([x.shape[dim] for x in xs[:i]], dtype=np.int64))
    return _placed_along(t, dim, start, ans.shape[dim], ans.ndim)


_cat = Op("cat", lambda *xs, dim: np.concatenate(xs, axis=dim), _cat_grad, _cat_tangent)


def _as_tensors(tensors, what):
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}() expects a non-empty list of tensors")
    return [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]


def cat(tensors, dim=0):
    tensors = _as_tensors(tensors, "cat")
    return _cat(*tensors, dim=_dim(dim, tensors[0].ndim))


concat = cat

_stack = Op("stack", lambda *xs, dim: np.stack(xs, axis=dim),
            lambda i, g, ans, *xs, dim: getitem(g, (slice(None),) * dim + (i,)),
            lambda i, t, ans, *xs, dim:
            _placed_along(t.unsqueeze(dim), dim, i, len(xs), ans.ndim))


def stack(tensors, dim=0):
    tensors = _as_tensors(tensors, "stack")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise RuntimeError(f"stack expects each tensor to be equal size, got shapes {sorted(shapes)}")
    ndim = tensors[0].ndim + 1
    if not -ndim <= dim < ndim:
        raise IndexError(f"stack: dim {dim} out of range for {ndim - 1}-d tensors")
    return _stack(*tensors, dim=dim % ndim)


def split(x, split_size_or_sections, dim=0):
    d = _dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError(f"split: split_size must be positive, got {split_size_or_sections}")
        sizes = [split_size_or_sections] * (n // split_size_or_sections)
        if n % split_size_or_sections:
            sizes.append(n % split_size_or_sections)
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise RuntimeError(f"split: sections {sizes} add up to {sum(sizes)}, but dimension "
                               f"{dim} has size {n}")
    name = ("SplitBackward0" if isinstance(split_size_or_sections, int)
            else "SplitWithSizesBackward0")
    out, start, lead = [], 0, (slice(None),) * d
    for size in sizes:  # slices need no normalize_index
        out.append(named(_getitem(x, index=lead + (slice(start, start + size),)), name, x))
        start += size
    return tuple(out)


def chunk(x, chunks, dim=0):
    if chunks <= 0:
        raise ValueError(f"chunk: the number of chunks must be positive, got {chunks}")
    n = x.shape[_dim(dim, x.ndim)]
    return split(x, max(-(-n // chunks), 1), dim)


def _pad_widths(ndim, pad):
    """numpy's (before, after) per dimension from torch's flat list, last dimension first."""
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the "
                           f"input dimension but got padding length {len(pad)} and input of "
                           f"dimension {ndim}")
    widths = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        widths[ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    return tuple(widths)


_pad = Op("pad", lambda x, widths, value: np.pad(x, widths, constant_values=value),
          (lambda g, ans, x, widths, value:
           getitem(g, tuple(slice(lo, lo + n) for (lo, _), n in zip(widths, x.shape))),),
          (lambda t, ans, x, widths, value: _pad(t, widths=widths, value=0.0),))


def _source_positions(mode, size, before, after):
    """For each position along a padded axis, the input position it copies (torch's modes;
    a negative width crops)."""
    position = np.arange(-before, size + after)
    if mode == "reflect":
        if max(before, after) >= size:
            raise RuntimeError(f"Padding size should be less than the corresponding input "
                               f"dimension, but got: padding ({before}, {after}) of an input "
                               f"dimension of size {size}")
        period = 2 * (size - 1) if size > 1 else 1
        position = np.abs(position) % period
        return np.where(position >= size, period - position, position)
    if mode == "replicate":
        return np.clip(position, 0, size - 1)
    if max(before, after) > size:
        raise RuntimeError("Padding value causes wrapping around more than once.")
    # circular: the wrap runs over what is left after cropping
    first, stop = max(0, -before), size - max(0, -after)
    return first + (position - first) % (stop - first)


def pad(x, pad, mode="constant", value=None):
    """torch.nn.functional.pad: `pad` lists (before, after) pairs starting from the last
    dimension. mode 'constant' fills with `value` (any number of dimensions; negative widths
    crop); 'reflect' mirrors about the edge, 'replicate' repeats it, 'circular' wraps around,
    each for the last 1, 2 or 3 dimensions of an input with one or two more, as torch."""
    pad = tuple(pad)
    widths = _pad_widths(x.ndim, pad)
    if mode == "constant":
        crop = tuple(slice(max(0, -lo), n - max(0, -hi)) for (lo, hi), n in zip(widths, x.shape))
        if any(lo < 0 or hi < 0 for lo, hi in widths):
            x = getitem(x, crop)
            widths = tuple((max(0, lo), max(0, hi)) for lo, hi in widths)
        return named(_pad(x, widths=widths, value=0.0 if value is None else value),
                     "ConstantPadNdBackward0", x)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    dims = len(pad) // 2
    if dims not in (1, 2, 3) or x.ndim not in (dims + 1, dims + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {x.ndim}D input tensor. Supported "
            f"combinations for non-constant padding: 2D or 3D input with padding size 2, 3D or "
            f"4D with 4, 4D or 5D with 6")
    # One gather per padded dimension: its gradient (adding each copy back onto its source)
    # and its tangent come from getitem's.
    source = x
    for axis in range(x.ndim - dims, x.ndim):
        before, after = widths[axis]
        if before or after:
            index = _source_positions(mode, x.shape[axis], before, after)
            x = getitem(x, (slice(None),) * axis + (index,))
    if mode == "circular":  # torch's is several ops too
        return x
    kind = "Reflection" if mode == "reflect" else "Replication"
    return named(x, f"{kind}Pad{dims}DBackward0", source)


# ----------------------------------------------------------------------------- torch's selections
# Each is a composition of the ops above, so its gradient (to any order) comes from theirs.
def index_select(x, dim, index):
    """The entries of `x` at the 1-D integer `index` along `dim`."""
    index = index if isinstance(index, Tensor) else Tensor(np.asarray(index))
    if index.ndim > 1 or index.dtype.kind not in "iu":
        raise IndexError(f"index_select(): index must be a 1-D integer tensor, got a "
                         f"{index.ndim}-D {index.dtype} tensor")
    return named(getitem(x, (slice(None),) * _dim(dim, x.ndim) + (index._array.reshape(-1),)),
                 "IndexSelectBackward0", x)


def gather(x, dim, index):
    """torch.gather: `out[i][j] = x[index[i][j]][j]` along `dim` (2-D case); `index` has x's
    number of dimensions and is no larger than x along the others."""
    axis = _dim(dim, x.ndim)
    if index.ndim != x.ndim:
        raise RuntimeError(f"gather(): index has {index.ndim} dimensions but the input has "
                           f"{x.ndim}; they must have the same number")
    if any(i > s for d, (i, s) in enumerate(zip(index.shape, x.shape)) if d != axis):
        raise RuntimeError(f"gather(): index {tuple(index.shape)} is larger than the input "
                           f"{tuple(x.shape)} in a dimension other than {axis}")
    from .reduction import take_along_dim  # reduction imports this module
    window = tuple(slice(None) if d == axis else slice(0, i) for d, i in enumerate(index.shape))
    return named(take_along_dim(getitem(x, window), index, axis), "GatherBackward0", x)


def repeat(x, sizes):
    """torch's Tensor.repeat: tile `x` sizes[d] times along each dimension (leading sizes add
    dimensions). An expand of an interleaved reshape, reshaped back."""
    sizes = tuple(sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    shape = (1,) * (len(sizes) - x.ndim) + tuple(x.shape)
    interleaved = reshape(x, tuple(v for s in shape for v in (1, s)))
    tiled = expand(interleaved, tuple(v for r, s in zip(sizes, shape) for v in (r, s)))
    return named(reshape(tiled, tuple(r * s for r, s in zip(sizes, shape))), "RepeatBackward0",
                 x)


def tensor_split(x, indices_or_sections, dim=0):
    """x cut along `dim` into `sections` nearly equal pieces (the first ones one longer), or
    at the given indices; each piece a slice."""
    axis = _dim(dim, x.ndim)
    n = x.shape[axis]
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
        sizes = [n // sections + (1 if k < n % sections else 0) for k in range(sections)]
        bounds = [0]
        for size in sizes:
            bounds.append(bounds[-1] + size)
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    lead = (slice(None),) * axis
    return tuple(_getitem(x, index=lead + (slice(start, stop),))
                 for start, stop in zip(bounds[:-1], bounds[1:]))


def _split_along(name, x, dim, indices_or_sections):
    """hsplit's and vsplit's checks, then tensor_split."""
    if isinstance(indices_or_sections, int) and (
            indices_or_sections == 0 or x.shape[dim] % indices_or_sections):
        raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the size "
                           f"of the dimension {x.shape[dim]} is not divisible by the split_size "
                           f"{indices_or_sections}!")
    return tensor_split(x, indices_or_sections, dim)


def hsplit(x, indices_or_sections):
    """tensor_split along dimension 1 (0 for a 1-d x), into equal pieces when given a count."""
    if x.ndim == 0:
        raise RuntimeError("torch.hsplit requires a tensor with at least 1 dimension, but got "
                           "a tensor with 0 dimensions!")
    return _split_along("hsplit", x, 1 if x.ndim > 1 else 0, indices_or_sections)


def vsplit(x, indices_or_sections):
    """tensor_split along dimension 0 of an x of two dimensions or more."""
    if x.ndim < 2:
        raise RuntimeError(f"torch.vsplit requires a tensor with at least 2 dimension, but got "
                           f"a tensor with {x.ndim} dimensions!")
    return _split_along("vsplit", x, 0, indices_or_sections)


def take(x, index):
    """The elements of x at `index` into its flattened self (negative indices count back)."""
    flat = reshape(x, (-1,))
    positions = index._array.astype(np.int64, copy=False)
    size = flat.shape[0]
    out_of_range = (positions >= size) | (positions < -size)
    if out_of_range.any():
        raise IndexError(f"out of range: tried to access index {positions[out_of_range][0]} on "
                         f"a tensor of {size} elements.")
    return named(getitem(flat, positions), "TakeBackward0", x)


def trace(x):
    """The sum of a matrix's main diagonal."""
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    diagonal = np.arange(min(x.shape))
    return named(getitem(x, (diagonal, diagonal)).sum(), "TraceBackward0", x)


def tile(x, dims):
    """torch.tile: repeat with `dims` padded by leading ones to x's rank."""
    dims = tuple(dims)
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


def movedim(x, source, destination):
    """x with its dimensions `source` (an int or a sequence) moved to `destination`, the
    others keeping their order: a permute, as in torch."""
    source = (source,) if isinstance(source, int) else tuple(source)
    destination = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(source) != len(destination):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source "
                           f"({list(source)} dims) should contain the same number of dims as "
                           f"destination ({list(destination)} dims)")
    source = tuple(_dim(d, x.ndim) for d in source)
    destination = tuple(_dim(d, x.ndim) for d in destination)
    for name, dims in (("source", source), ("destination", destination)):
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({list(dims)})")
    order = [None] * x.ndim
    for s, d in zip(source, destination):
        order[d] = s
    rest = iter(d for d in range(x.ndim) if d not in source)
    return permute(x, tuple(d if d is not None else next(rest) for d in order))


def swapaxes(x, axis0, axis1):
    """torch.swapaxes (and swapdims): transpose."""
    return transpose(x, axis0, axis1)


def unflatten(x, dim, sizes):
    """Dimension `dim` of x split into `sizes` (one of them may be -1): a view."""
    axis = _dim(dim, x.ndim)
    sizes = tuple(int(size) for size in sizes)
    known = math.prod(size for size in sizes if size != -1)
    unknown = sizes.count(-1)
    if unknown > 1 or (unknown == 0 and known != x.shape[axis]) or (
            unknown == 1 and (known == 0 or x.shape[axis] % known)):
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the "
                           f"size of dim {dim} ({x.shape[axis]}) in the input tensor")
    if unknown:
        sizes = tuple(x.shape[axis] // known if size == -1 else size for size in sizes)
    return reshape(x, tuple(x.shape[:axis]) + sizes + tuple(x.shape[axis + 1:]))


def masked_select(x, mask):
    """The elements of x where the bool `mask` is True (both broadcast), as a 1-d tensor."""
    if mask.dtype != np.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = np.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    picked = getitem(expand(x, shape), np.broadcast_to(mask._array, shape))
    return named(picked, "MaskedSelectBackward0", x)


def unbind(x, dim=0):
    """The slices of `x` along `dim`, as a tuple."""
    axis = _dim(dim, x.ndim)
    return tuple(named(getitem(x, (slice(None),) * axis + (i,)), "UnbindBackward0", x)
                 for i in range(x.shape[axis]))


def broadcast_to(x, size):
    """torch.broadcast_to: `x` expanded to `size` (a view; -1 keeps a dimension)."""
    return expand(x, tuple(size))


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 1-D tensors: `indexing='ij'` (matrix, torch's default) or 'xy'
    (Cartesian: the first two grid dimensions swapped). Each grid is a broadcast view."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the "
                      "indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise ValueError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: '
                         f"{indexing}")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got: {t}")
    sizes = [t._array.size for t in tensors]
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for i, t in enumerate(tensors):
        axis = {0: 1, 1: 0}.get(i, i) if swap else i
        shape = [1] * len(tensors)
        shape[axis] = -1
        grids.append(expand(reshape(t, tuple(shape)), tuple(sizes)))
    return tuple(grids)
