"""Sparse COO tensors (torch.sparse_coo_tensor), as far as sparse gradients need them.

`Embedding(sparse=True)` gives its weight a gradient that holds only the rows the batch
looked up: a SparseTensor of `indices` (int64, (sparse_dim, nnz)) and `values` (nnz rows of
shape dense_shape), with the weight's size. Like torch's, it may be uncoalesced (an index
repeated, in any order; `coalesce()` sorts them and adds the repeats), and adding two of them
walks both index lists at once, as torch's sparse add does, so the gradient two backward
passes leave has torch's indices and values.

What it supports: construction and inspection (`_indices`, `_values`, `indices`/`values` once
coalesced, `coalesce`, `to_dense`, `_nnz`), adding sparse to sparse and to dense, scaling by a
number, `zero_`, `sum()`, and being added into a parameter by an optimizer (`p.add_(grad,
alpha=-lr)`). Everything else is dense code, which reads a tensor's storage as `_array`: on a
SparseTensor that raises NotImplementedError naming the layout, as torch's kernels without a
sparse version do. Sparse tensors take no part in autograd (requires_grad stays False).
"""
import numpy as np

from . import dtypes
from .autograd import grad_mode
from .creation import as_tensor
from .device import require_cpu
from .tensor import Tensor, init_autograd_state, to_arguments

__all__ = ["SparseTensor", "sparse_coo_tensor"]


class SparseTensor(Tensor):
    __slots__ = ("_sparse_indices", "_sparse_values", "_size", "_coalesced")
    is_sparse = True
    layout = dtypes.sparse_coo

    @classmethod
    def make(cls, indices, values, size, coalesced):
        """A new sparse tensor on `indices` (an int64 (sparse_dim, nnz) array) and `values`
        (an (nnz, *dense) array), not copied and not checked."""
        t = object.__new__(cls)
        init_autograd_state(t)
        t._sparse_indices = indices
        t._sparse_values = values
        t._size = tuple(int(n) for n in size)
        t._coalesced = bool(coalesced)
        return t

    @property
    def _array(self):
        raise NotImplementedError(
            "this operation has no sparse version: it needs a dense (strided) tensor, but got "
            "a sparse COO tensor (layout=torch.sparse_coo); call to_dense() first")

    # ----------------------------------------------------------------- metadata
    @property
    def shape(self):
        return self._size

    @property
    def dtype(self):
        return self._sparse_values.dtype

    @property
    def ndim(self):
        return len(self._size)

    def size(self, dim=None):
        return self._size if dim is None else self._size[dim]

    def dim(self):
        return len(self._size)

    def numel(self):
        return int(np.prod(self._size, dtype=np.int64))

    nelement = numel

    def element_size(self):
        return self._sparse_values.itemsize

    def is_floating_point(self):
        return dtypes.is_floating_point(self.dtype)

    def __len__(self):
        return self._size[0]

    def sparse_dim(self):
        return self._sparse_indices.shape[0]

    def dense_dim(self):
        return self._sparse_values.ndim - 1

    def _nnz(self):
        return self._sparse_indices.shape[1]

    def is_coalesced(self):
        return self._coalesced

    def _indices(self):
        """The indices as stored (repeats and any order while uncoalesced), sharing memory."""
        return Tensor.wrap(self._sparse_indices)

    def _values(self):
        return Tensor.wrap(self._sparse_values)

    def indices(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._indices()

    def values(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._values()

    @property
    def data(self):
        """torch's `.data`: the same entries, outside autograd."""
        return self.detach()

    def requires_grad_(self, requires_grad=True):
        if requires_grad:
            raise NotImplementedError("mpigrad's sparse tensors take no part in autograd; "
                                      "use to_dense() for a tensor that requires grad")
        return self

    def numpy(self):
        raise TypeError("can't convert Sparse layout tensor to numpy. Use Tensor.to_dense() "
                        "first.")

    __array__ = numpy

    def __repr__(self):
        indices = repr(Tensor.wrap(self._sparse_indices)).replace("\n", "\n" + " " * 15)
        values = repr(Tensor.wrap(self._sparse_values)).replace("\n", "\n" + " " * 14)
        return (f"tensor(indices={indices},\n       values={values},\n       size={self._size}, "
                f"nnz={self._nnz()}, layout=torch.sparse_coo)")

    # ----------------------------------------------------------------- conversions
    def _keys(self):
        """Each entry's position as one integer (row-major over the sparse dimensions), so
        that comparing keys compares indices lexicographically, as torch does."""
        if self.sparse_dim() == 1:
            return self._sparse_indices[0]
        return np.ravel_multi_index(tuple(self._sparse_indices), self._size[:self.sparse_dim()])

    def coalesce(self):
        """This tensor with its indices sorted and each repeat's values added (in the order
        they are stored); itself if already coalesced."""
        if self._coalesced:
            return self
        keys = self._keys()
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]) \
            if keys.size else np.zeros(0, np.int64)
        values = self._sparse_values[order]
        if values.shape[0]:
            values = np.add.reduceat(values, starts, axis=0)
        indices = self._sparse_indices[:, order[starts]]
        return self.make(indices, values, self._size, True)

    def to_dense(self):
        with grad_mode.no_grad():
            out = Tensor.wrap(np.zeros(self._size, self.dtype))
        self._add_into(out)
        return out

    def clone(self):
        return self.make(self._sparse_indices.copy(), self._sparse_values.copy(), self._size,
                         self._coalesced)

    def detach(self):
        return self.make(self._sparse_indices, self._sparse_values, self._size, self._coalesced)

    def to(self, *args, **kwargs):
        """Tensor.to's forms; only the dtype (of the values) can change."""
        dtype, copy = to_arguments("Tensor.to", args, kwargs)
        dtype = dtypes.to_dtype(dtype)
        if dtype is None or dtype == self.dtype:
            return self.clone() if copy else self
        return self.make(self._sparse_indices, self._sparse_values.astype(dtype), self._size,
                         self._coalesced)

    # ----------------------------------------------------------------- arithmetic
    def _add_into(self, target, alpha=1):
        """dense += alpha * self, entry by entry in the stored order, as torch's dense += sparse
        (and `target.add_(self, alpha=alpha)`). Returns target."""
        if tuple(target.shape) != self._size:
            raise RuntimeError(f"add_: expected 'self' and 'other' to have same size, but self "
                               f"has size {list(target.shape)} while other has size "
                               f"{list(self._size)}")
        if grad_mode.is_grad_enabled() and target.requires_grad:
            raise RuntimeError("adding a sparse tensor in place into a tensor that requires "
                               "grad is not recorded by autograd; do it under no_grad() (as "
                               "optimizers do)")
        values = self._sparse_values if alpha == 1 else self._sparse_values * alpha
        with target.writing() as array:
            np.add.at(array, tuple(self._sparse_indices), values.astype(array.dtype, copy=False))
        return target

    def _merged(self, other, alpha):
        """self + alpha * other as torch's CPU kernel makes it: one pass down both index
        lists, taking the smaller head (self's on a tie, then both added into one entry).
        Sorted lists give a sorted union; others are interleaved as that pass meets them.
        The result is coalesced when both were."""
        if not isinstance(other, SparseTensor):
            raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) "
                               "instead.")
        if other._size != self._size:
            raise RuntimeError(f"add: expected sizes of 'self' and 'other' to match, but "
                               f"{list(self._size)} != {list(other._size)}")
        dtype = np.result_type(self._sparse_values, other._sparse_values)
        mine, theirs = self._keys().tolist(), other._keys().tolist()
        # Which entry of self and of other each output entry takes (-1: none).
        take_mine, take_theirs = [], []
        i = j = 0
        while i < len(mine) or j < len(theirs):
            if i >= len(mine):
                step = -1
            elif j >= len(theirs):
                step = 1
            else:
                step = (mine[i] < theirs[j]) - (mine[i] > theirs[j])
            take_mine.append(i if step >= 0 else -1)
            take_theirs.append(j if step <= 0 else -1)
            i += step >= 0
            j += step <= 0
        take_mine, take_theirs = np.array(take_mine, np.int64), np.array(take_theirs, np.int64)
        values = np.zeros((take_mine.size,) + self._sparse_values.shape[1:], dtype)
        indices = np.empty((self.sparse_dim(), take_mine.size), np.int64)
        from_mine, from_theirs = take_mine >= 0, take_theirs >= 0
        values[from_mine] += self._sparse_values[take_mine[from_mine]]
        scaled = other._sparse_values[take_theirs[from_theirs]]
        values[from_theirs] += scaled if alpha == 1 else scaled * alpha
        indices[:, from_theirs] = other._sparse_indices[:, take_theirs[from_theirs]]
        indices[:, from_mine] = self._sparse_indices[:, take_mine[from_mine]]
        return indices, values, self._coalesced and other._coalesced

    def add(self, other, alpha=1):
        indices, values, coalesced = self._merged(other, alpha)
        return self.make(indices, values, self._size, coalesced)

    def __add__(self, other):
        return self.add(other)

    def __radd__(self, other):
        """dense + sparse: a dense tensor, torch's only order for mixing the two."""
        if not isinstance(other, Tensor):
            raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) "
                               "instead.")
        if grad_mode.is_grad_enabled() and other.requires_grad:
            return other + self.to_dense()
        with grad_mode.no_grad():
            out = Tensor.wrap(np.array(other._array, np.result_type(other.dtype, self.dtype)))
        return self._add_into(out)

    def add_(self, other, alpha=1):
        self._sparse_indices, self._sparse_values, self._coalesced = self._merged(other, alpha)
        self._vc[0] += 1
        return self

    def _scaled(self, factor):
        if isinstance(factor, Tensor):
            raise NotImplementedError("a sparse tensor can be scaled by a number only")
        return self.make(self._sparse_indices, self._sparse_values * factor, self._size,
                         self._coalesced)

    def __mul__(self, factor):
        return self._scaled(factor)

    __rmul__ = mul = __mul__

    def __truediv__(self, divisor):
        if isinstance(divisor, Tensor):
            raise NotImplementedError("a sparse tensor can be divided by a number only")
        return self.make(self._sparse_indices, self._sparse_values / divisor, self._size,
                         self._coalesced)

    div = __truediv__

    def __neg__(self):
        return self.make(self._sparse_indices, -self._sparse_values, self._size,
                         self._coalesced)

    neg = __neg__

    def mul_(self, factor):
        if isinstance(factor, Tensor):
            raise NotImplementedError("a sparse tensor can be scaled by a number only")
        self._sparse_values *= factor
        self._coalesced = False  # as torch's in-place scaling leaves it
        self._vc[0] += 1
        return self

    def zero_(self):
        """No entries left (nnz 0, coalesced), as torch's."""
        self._sparse_indices = np.zeros((self.sparse_dim(), 0), np.int64)
        self._sparse_values = np.zeros((0,) + self._sparse_values.shape[1:], self.dtype)
        self._coalesced = True
        self._vc[0] += 1
        return self

    def sum(self, dim=None, keepdim=False, dtype=None):
        if dim is not None:
            raise NotImplementedError("sum over dimensions of a sparse tensor: use "
                                      "to_dense().sum(dim)")
        total = self._sparse_values.sum(dtype=dtype)
        return Tensor.wrap(np.asarray(total, dtypes.to_dtype(dtype) or self.dtype))


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """torch.sparse_coo_tensor: entries `values[k]` at `indices[:, k]` of a tensor of `size`
    (by default the smallest that holds every index). Repeated indices are allowed (they add
    up); the result is uncoalesced unless it has at most one entry or `is_coalesced=True`
    says so. Indices are always checked against `size`, as torch does with
    check_invariants=True: an index outside is a RuntimeError, never a silent write."""
    if device is not None:
        require_cpu("sparse_coo_tensor", device)
    if requires_grad:
        raise NotImplementedError("mpigrad's sparse tensors take no part in autograd; build "
                                  "the tensor with to_dense() for one that requires grad")
    index_array = np.asarray(as_tensor(indices)._array)
    if index_array.dtype.kind not in "iu":
        raise RuntimeError(f"indices must be an int64 tensor, got {index_array.dtype}")
    value_array = np.asarray(as_tensor(values, dtype=dtype)._array)
    if index_array.ndim != 2:
        sparse_dim = index_array.shape[0] if index_array.ndim else 0
        dense_dim = max(value_array.ndim - 1, 0)
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) "
                           f"= {len(size) if size is not None else '?'}, sparse_dim = "
                           f"{sparse_dim}, dense_dim = {dense_dim}")
    index_array = index_array.astype(np.int64, copy=False)
    sparse_dim, nnz = index_array.shape
    if value_array.ndim == 0 or value_array.shape[0] != nnz:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: "
                           f"{nnz}, nnz from values: "
                           f"{value_array.shape[0] if value_array.ndim else 0}")
    dense_shape = value_array.shape[1:]
    if size is None:
        size = tuple(int(n) + 1 for n in index_array.max(axis=1)) if nnz else (0,) * sparse_dim
        size += dense_shape
    size = tuple(int(n) for n in size)
    if len(size) != sparse_dim + len(dense_shape):
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) "
                           f"= {len(size)}, sparse_dim = {sparse_dim}, dense_dim = "
                           f"{len(dense_shape)}")
    if size[sparse_dim:] != dense_shape:
        raise RuntimeError(f"values has incorrect size, expected {[nnz, *size[sparse_dim:]]}, "
                           f"got {list(value_array.shape)}")
    if nnz:
        for d in range(sparse_dim):
            low, high = index_array[d].min(), index_array[d].max()
            if low < 0:
                raise RuntimeError(f"found negative index {low} for dim {d}")
            if high >= size[d]:
                raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is "
                                   f"{size[d]} but found index {high}")
    coalesced = nnz <= 1 if is_coalesced is None else is_coalesced
    return SparseTensor.make(index_array, value_array, size, coalesced)
