"""Tensor: a numpy array plus the links autograd needs.

Storage is `_array` (an ndarray), mpigrad's own handle on it; the public `data` is torch's, a
new tensor on the same array outside autograd (see `Tensor.data`). Graph links: `grad_fn` (the
Node that produced it) and `_output_nr`; leaves that require grad are reached through an
AccumulateGrad node. Every in-place write bumps a version counter shared by all tensors that
alias the same storage, so backward can tell when a saved tensor was changed after it was saved.

Tensor owns that state: the rest of mpigrad creates, aliases, writes and links tensors only
through `Tensor.wrap`, `alias`, `writing` (or `mark_written`) and `set_history`, never by
setting the fields.
"""
import numbers
import weakref

import numpy as np

from . import _tensor_str, dtypes, random
from .device import CPU, device, require_cpu
from .hooks import add_hook


class Tensor:
    __slots__ = ("_array", "requires_grad", "grad", "grad_fn", "_output_nr", "_vc", "_base",
                 "_hooks", "_post_accumulate_hooks", "_accumulator", "_retains_grad",
                 "_inference", "__weakref__")
    # Make numpy defer to Tensor's reflected operators (ndarray * Tensor -> Tensor).
    __array_priority__ = 1000

    def __init__(self, data, dtype=None, requires_grad=False):
        """Wraps `data` without copying when it already is an ndarray of the right dtype."""
        array = _as_array(data, dtype)
        _init(self, array)
        if requires_grad:
            self.requires_grad_(True)

    # ----------------------------------------------------------------- autograd state
    # The only ways mpigrad's own packages make tensors, alias them, write into them and link
    # them into the graph; keeping these together keeps the version counter honest.
    @classmethod
    def wrap(cls, array):
        """A new leaf tensor on `array` (an ndarray, not copied) with its own version counter."""
        # Every op's result is made here, so one call deep (not through `_init`).
        t = object.__new__(cls)
        t._array = array
        init_autograd_state(t)
        return t

    def mark_written(self):
        """Record that this tensor's storage was changed outside autograd. Only for writes
        that cannot sit inside a `writing()` block, such as a nonblocking MPI receive that
        completes later; everything else uses `writing()`."""
        self._vc[0] += 1

    def alias(self, array=None, view=True):
        """A new tensor on `array` (default: this tensor's storage) sharing this tensor's
        version counter, with no graph history. With `view`, it also records this tensor (or
        its own base) as its base, so autograd refuses recorded in-place writes into it."""
        t = Tensor.wrap(self._array if array is None else array)
        t._vc = self._vc
        if view:
            t._base = self._base if self._base is not None else self
        return t

    def writing(self):
        """`with t.writing() as array:` write into `array` (t's storage) in place; on leaving
        the block t is marked as written (its version goes up), even if the write failed."""
        return _Writing(self)

    def set_history(self, grad_fn, output_nr=0):
        """Make this tensor output `output_nr` of the graph node `grad_fn`."""
        self.grad_fn = grad_fn
        self._output_nr = output_nr
        self.requires_grad = True

    @property
    def data(self):
        """torch's `.data`: a new tensor on this tensor's storage, outside autograd (no
        history, requires_grad False, no base) with a version counter of its own, so that an
        in-place write through it changes this tensor without autograd seeing it, as in torch
        (`detach()` shares the counter instead). mpigrad's own code uses `_array`."""
        return Tensor.wrap(self._array)

    @data.setter
    def data(self, value):
        """`t.data = other`: t now uses other's storage (shape and dtype may change); t keeps
        its autograd state and its version counter, as in torch."""
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}")
        if self.requires_grad and not dtypes.is_differentiable(value._array.dtype):
            raise RuntimeError("data set to a tensor that requires gradients must be floating "
                               "point or complex dtype")
        self._array = value._array

    # ----------------------------------------------------------------- metadata
    @property
    def shape(self):
        return self._array.shape

    @property
    def dtype(self):
        return self._array.dtype

    @property
    def ndim(self):
        return self._array.ndim

    @property
    def device(self):
        return CPU

    is_cuda = False
    is_meta = False
    # A dense array; mpigrad.sparse's SparseTensor says otherwise.
    is_sparse = False
    layout = dtypes.strided

    @property
    def is_leaf(self):
        return self.grad_fn is None

    @property
    def _version(self):
        return self._vc[0]

    def is_inference(self):
        """Whether this tensor was made under `inference_mode()` (see ops.core's checks)."""
        return self._inference

    @property
    def T(self):
        return ops.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        return ops.transpose(self, -2, -1)

    def size(self, dim=None):
        return self._array.shape if dim is None else self._array.shape[dim]

    def dim(self):
        return self._array.ndim

    def numel(self):
        return self._array.size

    nelement = numel

    def element_size(self):
        return self._array.itemsize

    def is_floating_point(self):
        return dtypes.is_floating_point(self._array.dtype)

    def is_contiguous(self):
        return self._array.flags.c_contiguous

    def stride(self, dim=None):
        """The steps between neighbours along each dimension, in elements (0 along a
        broadcast one), or along `dim`."""
        item = self._array.itemsize
        strides = tuple(step // item for step in self._array.strides)
        if dim is None:
            return strides
        if self._array.ndim == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        return strides[_wrap_dim(dim, self._array.ndim)]

    def __len__(self):
        if self._array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._array.shape[0]

    def __iter__(self):
        if self._array.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._array.shape[0]))

    def __hash__(self):
        return id(self)

    def __format__(self, spec):
        """As torch: a 0-d tensor formats as its number (`f"{loss:.4f}"`); any other tensor
        only with an empty spec."""
        if self._array.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __repr__(self):
        return _tensor_str.tensor_repr(
            self._array, None if self.grad_fn is None else self.grad_fn.name(),
            self.requires_grad)

    # ----------------------------------------------------------------- conversion
    def numpy(self):
        """The underlying array, shared. Like torch, refuses a tensor that requires grad."""
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on a tensor that requires grad; use "
                               "tensor.detach().numpy() instead.")
        return self._array

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    # DLPack, as torch's tensors: `torch.tensor(t)` and `np.from_dlpack(t)` read the storage
    # (torch would otherwise take a tensor for a sequence, and fail at its 0-d elements).
    def __dlpack__(self, **kwargs):
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use "
                              "tensor.detach()")
        if self._array.dtype == dtypes.bfloat16:
            raise BufferError("DLPack (numpy's) has no bfloat16: export t.float() and convert "
                              "back on the other side")
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def item(self):
        if self._array.size != 1:
            raise RuntimeError(f"a tensor with {self._array.size} elements cannot be converted "
                               "to a Python number")
        return self._array.item()

    def tolist(self):
        return self._array.tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._array.dtype.kind not in "iu":
            raise TypeError("only integer tensors of a single element can be used as an index")
        return int(self.item())

    def __bool__(self):
        if self._array.size != 1:
            raise RuntimeError(f"the truth value of a tensor with {self._array.size} elements "
                               "is ambiguous")
        return bool(self._array.item())

    def to(self, *args, **kwargs):
        """torch's forms: `to(dtype)`, `to(device, dtype)`, `to(device=..., dtype=...)`,
        `to(other)`, with `non_blocking` and `copy`. The device must be the CPU: any other is an
        error, as in torch on a machine without it. Returns self when nothing changes, unless
        `copy=True`."""
        dtype, copy = to_arguments("Tensor.to", args, kwargs)
        dtype = dtypes.to_dtype(dtype)
        if dtype is not None and dtype != self._array.dtype:
            return ops.cast(self, dtype=dtype)
        return ops.clone(self) if copy else self

    def cpu(self):
        return self

    def cuda(self, device=None, non_blocking=False, memory_format=None):
        require_cpu("Tensor.cuda", "cuda")

    def type(self, dtype=None, non_blocking=False):
        """With no argument, torch's legacy type name ('torch.FloatTensor'); otherwise this
        tensor as the given dtype, legacy type name or legacy type (`mpigrad.LongTensor`)."""
        if dtype is None:
            return dtypes.legacy_type_name(self.dtype)
        if isinstance(dtype, str):
            dtype = dtypes.from_legacy_type_name(dtype)
        return self.to(getattr(dtype, "dtype", dtype))

    def float(self):
        return self.to(dtypes.float32)

    def double(self):
        return self.to(dtypes.float64)

    def half(self):
        return self.to(dtypes.float16)

    def bfloat16(self):
        return self.to(dtypes.bfloat16)

    def long(self):
        return self.to(dtypes.int64)

    def int(self):
        return self.to(dtypes.int32)

    def bool(self):
        return self.to(dtypes.bool)

    def type_as(self, other):
        return self.to(other.dtype)

    # ----------------------------------------------------------------- autograd
    def requires_grad_(self, requires_grad=True):
        if requires_grad and not dtypes.is_differentiable(self._array.dtype):
            raise RuntimeError(f"only floating point tensors can require gradients, got "
                               f"{self._array.dtype}")
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError("requires_grad can only be switched off on a leaf; use "
                               "detach() to get a tensor outside the graph.")
        self.requires_grad = bool(requires_grad)
        return self

    def detach(self):
        """A tensor on the same storage (and version counter) with no graph history."""
        return self.alias()

    def detach_(self):
        self.grad_fn = None
        self.requires_grad = False
        return self

    def retain_grad(self):
        if self.grad_fn is None:
            return
        if not self._retains_grad:
            ref = weakref.ref(self)

            def store(grad):
                t = ref()
                if t is not None:
                    t.grad = grad.detach().clone() if t.grad is None else t.grad + grad
            self.grad_fn.register_prehook(store, self._output_nr)
            self._retains_grad = True

    @property
    def retains_grad(self):
        return self._retains_grad

    def register_hook(self, hook):
        """`hook(grad) -> Tensor or None` runs when this tensor's gradient is computed; a
        returned tensor replaces the gradient."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require grad")
        if self.grad_fn is not None:
            return self.grad_fn.register_prehook(hook, self._output_nr)
        if self._hooks is None:
            self._hooks = {}
        return add_hook(self._hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """`hook(tensor)` runs on a leaf right after its `.grad` has been updated."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks can only be registered on leaf "
                               "tensors")
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require grad")
        if self._post_accumulate_hooks is None:
            self._post_accumulate_hooks = {}
        return add_hook(self._post_accumulate_hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        autograd.backward(self, gradient, retain_graph=retain_graph,
                          create_graph=create_graph, inputs=inputs)

    # ----------------------------------------------------------------- arithmetic
    def __add__(self, other):
        return ops.add(self, other)

    def __radd__(self, other):
        return ops.add(other, self)

    def __sub__(self, other):
        return ops.sub(self, other)

    def __rsub__(self, other):
        return ops.named(ops.sub(other, self), "RsubBackward1", self)

    def __mul__(self, other):
        return ops.mul(self, other)

    def __rmul__(self, other):
        return ops.mul(other, self)

    def __truediv__(self, other):
        return ops.div(self, other)

    def __rtruediv__(self, other):
        return ops.div(other, self)

    def __pow__(self, exponent):
        return ops.pow(self, exponent)

    def __rpow__(self, base):
        return ops.pow(base, self)

    def __mod__(self, other):
        return ops.remainder(self, other)

    def __rmod__(self, other):
        return ops.remainder(other, self)

    def __imod__(self, other):
        return ops.inplace(ops.remainder, self, other)

    def remainder(self, other):
        return ops.remainder(self, other)

    def fmod(self, other):
        return ops.fmod(self, other)

    def __neg__(self):
        return ops.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return ops.abs(self)

    def __matmul__(self, other):
        return ops.matmul(self, other)

    def __rmatmul__(self, other):
        return ops.matmul(other, self)

    # Comparisons take tensors, arrays and numbers; with anything else (a list, None,
    # pytest.approx) they return NotImplemented, as torch's do, so Python asks the other
    # operand (`t == pytest.approx(...)` compares with tolerance) and `==` falls back to
    # identity (False).
    def __eq__(self, other):
        return ops.eq(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __ne__(self, other):
        return ops.ne(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __lt__(self, other):
        return ops.lt(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __le__(self, other):
        return ops.le(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __gt__(self, other):
        return ops.gt(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __ge__(self, other):
        return ops.ge(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __and__(self, other):
        return ops.logical_and(self, other)

    def __or__(self, other):
        return ops.logical_or(self, other)

    def __invert__(self):
        return ops.logical_not(self)

    def __getitem__(self, index):
        return ops.getitem(self, index)

    def __setitem__(self, index, value):
        ops.setitem_(self, index, value)

    # In-place arithmetic: ops.inplace bumps the version and records the op in the graph.
    def __iadd__(self, other):
        return ops.inplace(ops.add, self, other)

    def __isub__(self, other):
        return ops.inplace(ops.sub, self, other)

    def __imul__(self, other):
        return ops.inplace(ops.mul, self, other)

    def __itruediv__(self, other):
        return ops.inplace(ops.div, self, other)

    def add_(self, other, alpha=1):
        if isinstance(other, Tensor) and other.is_sparse:
            # dense += sparse: only the rows the sparse tensor holds change (an optimizer's
            # step on a sparse gradient).
            return other._add_into(self, alpha)
        return ops.inplace(ops.add, self, other if alpha == 1 else other * alpha)

    def sub_(self, other, alpha=1):
        return ops.inplace(ops.sub, self, other if alpha == 1 else other * alpha)

    def mul_(self, other):
        return ops.inplace(ops.mul, self, other)

    def div_(self, other):
        return ops.inplace(ops.div, self, other)

    def pow_(self, exponent):
        return ops.inplace(ops.pow, self, exponent)

    def neg_(self):
        return ops.inplace(ops.neg, self)

    def exp_(self):
        return ops.inplace(ops.exp, self)

    def sqrt_(self):
        return ops.inplace(ops.sqrt, self)

    def relu_(self):
        return ops.inplace(ops.relu, self)

    def sigmoid_(self):
        return ops.inplace(ops.sigmoid, self)

    def tanh_(self):
        return ops.inplace(ops.tanh, self)

    def clamp_(self, min=None, max=None):
        return ops.inplace(ops.clamp_op, self, min=min, max=max)

    def addcmul_(self, tensor1, tensor2, value=1):
        return self.add_(tensor1 * tensor2, alpha=value)

    def addcdiv_(self, tensor1, tensor2, value=1):
        return self.add_(tensor1 / tensor2, alpha=value)

    def lerp_(self, end, weight):
        return self.add_((end - self) * weight)

    def copy_(self, src):
        return ops.inplace(ops.copy_from, self, src)

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        return ops.inplace(ops.fill_with, self, value=value)

    def masked_fill_(self, mask, value):
        return ops.inplace(ops.masked_fill, self, mask, value=value)

    def normal_(self, mean=0.0, std=1.0, generator=None):
        return self.copy_(random.normal_array(self.shape, mean, std, self.dtype, generator))

    def uniform_(self, a=0.0, b=1.0, generator=None):
        return self.copy_(random.uniform_array(self.shape, a, b, self.dtype, generator))

    def random_(self, from_=None, to=None, *, generator=None, **kwargs):
        """torch's random_: `random_()` draws integers from [0, 2**mantissa bits] for a
        floating tensor (every one exact) or [0, max] for an integer one; `random_(to)` from
        [0, to); `random_(from, to)` from [from, to). `from` may be given as a keyword, as
        in torch."""
        if "from" in kwargs:
            from_ = kwargs.pop("from")
        if kwargs:
            raise TypeError(f"random_() got an unexpected keyword argument {next(iter(kwargs))!r}")
        if to is None and from_ is not None:
            from_, to = 0, from_
        if to is None:
            to = _random_bound(self.dtype) + 1
        from_ = 0 if from_ is None else from_
        if from_ >= to:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                               f"from={from_} >= to={to}")
        drawn = random.integers_array(from_, to, self.shape, np.int64, generator)
        return self.copy_(drawn.astype(self.dtype))

    # ----------------------------------------------------------------- torch's method forms
    def add(self, other, alpha=1):
        return self + (other if alpha == 1 else other * alpha)

    def sub(self, other, alpha=1):
        return self - (other if alpha == 1 else other * alpha)

    def mul(self, other):
        return self * other

    def div(self, other, rounding_mode=None):
        """`rounding_mode` None (true division), "trunc" or "floor", as torch.div."""
        quotient = self / other
        if rounding_mode is None:
            return quotient
        if rounding_mode not in ("trunc", "floor"):
            raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or "
                             f"'floor' but found '{rounding_mode}'")
        rounded = ops.floor(quotient) if rounding_mode == "floor" else \
            ops.floor(quotient.abs()) * quotient.sign()
        integral = self.dtype.kind in "iu" and (not isinstance(other, Tensor)
                                                or other.dtype.kind in "iu")
        return rounded.to(self.dtype) if integral else rounded

    def neg(self):
        return -self

    def addcmul(self, tensor1, tensor2, value=1):
        return self + tensor1 * tensor2 * value

    def addcdiv(self, tensor1, tensor2, value=1):
        return self + tensor1 / tensor2 * value

    def lerp(self, end, weight):
        return ops.lerp(self, end, weight)

    def new_tensor(self, data, dtype=None, requires_grad=False):
        """A new leaf holding a copy of `data`, with this tensor's dtype unless told."""
        array = np.array(data._array if isinstance(data, Tensor) else data,
                         dtype=self.dtype if dtype is None else dtype)
        return Tensor(array, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, requires_grad=False):
        return self.new_tensor(np.full(_shape_arg((size,) if isinstance(size, int) else size),
                                       fill_value), dtype, requires_grad)

    def new_zeros(self, *size, dtype=None, requires_grad=False):
        return self.new_full(_shape_arg(size), 0, dtype, requires_grad)

    def new_ones(self, *size, dtype=None, requires_grad=False):
        return self.new_full(_shape_arg(size), 1, dtype, requires_grad)

    def new_empty(self, *size, dtype=None, requires_grad=False):
        return self.new_full(_shape_arg(size), 0, dtype, requires_grad)

    def gather(self, dim, index):
        return ops.gather(self, dim, index)

    def index_select(self, dim, index):
        return ops.index_select(self, dim, index)

    def repeat(self, *sizes):
        return ops.repeat(self, _shape_arg(sizes))

    def topk(self, k, dim=-1, largest=True, sorted=True):
        return ops.topk(self, k, dim, largest, sorted)

    def sort(self, dim=-1, descending=False, stable=False):
        return ops.sort(self, dim, descending, stable)

    def argsort(self, dim=-1, descending=False, stable=False):
        return ops.argsort(self, dim, descending, stable)

    def count_nonzero(self, dim=None):
        return ops.count_nonzero(self, dim)

    def nonzero(self, *, as_tuple=False):
        return ops.nonzero(self, as_tuple)

    def argwhere(self):
        return ops.argwhere(self)

    def masked_select(self, mask):
        return ops.masked_select(self, mask)

    def tile(self, *dims):
        return ops.tile(self, _shape_arg(dims))

    def movedim(self, source, destination):
        return ops.movedim(self, source, destination)

    moveaxis = movedim

    def swapaxes(self, axis0, axis1):
        return ops.swapaxes(self, axis0, axis1)

    swapdims = swapaxes

    def unflatten(self, dim, sizes):
        return ops.unflatten(self, dim, sizes)

    def dot(self, other):
        return ops.dot(self, other)

    def mv(self, vec):
        return ops.mv(self, vec)

    def tensor_split(self, indices_or_sections, dim=0):
        return ops.tensor_split(self, indices_or_sections, dim)

    def hsplit(self, indices_or_sections):
        return ops.hsplit(self, indices_or_sections)

    def vsplit(self, indices_or_sections):
        return ops.vsplit(self, indices_or_sections)

    def split_with_sizes(self, split_sizes, dim=0):
        return ops.split(self, list(split_sizes), dim)

    def take(self, index):
        return ops.take(self, index)

    def trace(self):
        return ops.trace(self)

    def aminmax(self, *, dim=None, keepdim=False):
        return ops.aminmax(self, dim, keepdim)

    def nansum(self, dim=None, keepdim=False, *, dtype=None):
        return ops.nansum(self, dim, keepdim, dtype)

    def nanmean(self, dim=None, keepdim=False):
        return ops.nanmean(self, dim, keepdim)

    def is_complex(self):
        return False  # mpigrad has no complex dtypes

    def is_signed(self):
        return self._array.dtype.kind in "if" or self._array.dtype == dtypes.bfloat16

    @property
    def nbytes(self):
        return self._array.nbytes

    @property
    def itemsize(self):
        return self._array.itemsize

    def data_ptr(self):
        """The address of the first element."""
        return self._array.ctypes.data

    def storage_offset(self):
        """Where the first element lies in the storage, in elements."""
        root = self._array
        while isinstance(root.base, np.ndarray):
            root = root.base
        return (self._array.ctypes.data - root.ctypes.data) // self._array.itemsize

    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return ops.isclose(self, other, rtol, atol, equal_nan)

    def equal(self, other):
        return ops.equal(self, other)

    def cumsum(self, dim, dtype=None):
        return ops.cumsum(self, dim, dtype)

    def prod(self, dim=None, keepdim=False, dtype=None):
        return ops.prod(self, dim, keepdim, dtype)

    def unbind(self, dim=0):
        return ops.unbind(self, dim)

    def floor(self):
        return ops.floor(self)

    def ceil(self):
        return ops.ceil(self)

    def round(self, decimals=0):
        return ops.round(self, decimals)

    # ----------------------------------------------------------------- math methods
    def exp(self):
        return ops.exp(self)

    def log(self):
        return ops.log(self)

    def sqrt(self):
        return ops.sqrt(self)

    def square(self):
        return ops.pow(self, 2)  # torch's square is pow(x, 2), PowBackward0

    def abs(self):
        return ops.abs(self)

    def sign(self):
        return ops.sign(self)

    def tanh(self):
        return ops.tanh(self)

    def sigmoid(self):
        return ops.sigmoid(self)

    def relu(self):
        return ops.relu(self)

    def sin(self):
        return ops.sin(self)

    def cos(self):
        return ops.cos(self)

    def pow(self, exponent):
        return ops.pow(self, exponent)

    def clamp(self, min=None, max=None):
        return ops.clamp(self, min, max)

    clip = clamp

    def maximum(self, other):
        return ops.maximum(self, other)

    def minimum(self, other):
        return ops.minimum(self, other)

    def masked_fill(self, mask, value):
        return ops.masked_fill(self, mask, value=value)

    def where(self, condition, other):
        return ops.where(condition, self, other)

    def erf(self):
        return ops.erf(self)

    def rsqrt(self):
        return ops.rsqrt(self)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        return ops.nan_to_num(self, nan, posinf, neginf)

    def tril(self, diagonal=0):
        return ops.tril(self, diagonal)

    def triu(self, diagonal=0):
        return ops.triu(self, diagonal)

    def bmm(self, mat2):
        return ops.bmm(self, mat2)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return ops.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return ops.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def outer(self, vec2):
        return ops.outer(self, vec2)

    ger = outer

    def scatter(self, dim, index, src=None, *, value=None, reduce=None):
        return ops.scatter(self, dim, index, src, value=value, reduce=reduce)

    def scatter_(self, dim, index, src=None, *, value=None, reduce=None):
        return ops.scatter_(self, dim, index, src, value=value, reduce=reduce)

    def scatter_add(self, dim, index, src):
        return ops.scatter_add(self, dim, index, src)

    def scatter_add_(self, dim, index, src):
        return ops.scatter_add_(self, dim, index, src)

    def index_add(self, dim, index, source, *, alpha=1):
        return ops.index_add(self, dim, index, source, alpha=alpha)

    def index_add_(self, dim, index, source, *, alpha=1):
        return ops.index_add_(self, dim, index, source, alpha=alpha)

    def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
        return ops.repeat_interleave(self, repeats, dim, output_size=output_size)

    def roll(self, shifts, dims=None):
        return ops.roll(self, shifts, dims)

    def flip(self, *dims):
        return ops.flip(self, dims[0] if len(dims) == 1 else dims)

    def broadcast_to(self, size):
        return ops.broadcast_to(self, size)

    def multinomial(self, num_samples, replacement=False, *, generator=None):
        return Tensor.wrap(random.multinomial_array(self._array, num_samples, replacement,
                                                    generator))

    def matmul(self, other):
        return ops.matmul(self, other)

    mm = matmul

    def sum(self, dim=None, keepdim=False, dtype=None):
        return ops.sum(self, dim, keepdim, dtype)

    def mean(self, dim=None, keepdim=False):
        return ops.mean(self, dim, keepdim)

    def var(self, dim=None, unbiased=None, keepdim=False, correction=None):
        return ops.var(self, dim, unbiased, keepdim, correction)

    def std(self, dim=None, unbiased=None, keepdim=False, correction=None):
        return ops.std(self, dim, unbiased, keepdim, correction)

    def norm(self, p=2, dim=None, keepdim=False):
        return ops.norm(self, p, dim, keepdim)

    def max(self, dim=None, keepdim=False):
        return ops.max(self, dim, keepdim)

    def min(self, dim=None, keepdim=False):
        return ops.min(self, dim, keepdim)

    def amax(self, dim=None, keepdim=False):
        return ops.amax(self, dim, keepdim)

    def amin(self, dim=None, keepdim=False):
        return ops.amin(self, dim, keepdim)

    def argmax(self, dim=None, keepdim=False):
        return ops.argmax(self, dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return ops.argmin(self, dim, keepdim)

    def softmax(self, dim):
        return ops.softmax(self, dim)

    def log_softmax(self, dim):
        return ops.log_softmax(self, dim)

    def logsumexp(self, dim, keepdim=False):
        return ops.logsumexp(self, dim, keepdim)

    def eq(self, other):
        return ops.eq(self, other)

    def ne(self, other):
        return ops.ne(self, other)

    def lt(self, other):
        return ops.lt(self, other)

    def le(self, other):
        return ops.le(self, other)

    def gt(self, other):
        return ops.gt(self, other)

    def ge(self, other):
        return ops.ge(self, other)

    def all(self):
        return Tensor.wrap(np.asarray(self._array.all()))

    def any(self):
        return Tensor.wrap(np.asarray(self._array.any()))

    # ----------------------------------------------------------------- shape
    def reshape(self, *shape):
        return ops.reshape(self, _shape_arg(shape))

    def view(self, *shape):
        if isinstance(shape[0], np.dtype) or shape[0] in (float, int):
            raise TypeError("view(dtype) is not supported; use .to(dtype)")
        shape = _shape_arg(shape)
        # As torch: any shape the strides allow without a copy (splitting the last dim of a
        # non-contiguous slice, as attention code does), not only of contiguous tensors.
        # numpy refuses to set a shape in place exactly when it would need a copy.
        probe = self._array.view()
        try:
            probe.shape = shape
        except AttributeError:
            raise RuntimeError("view size is not compatible with input tensor's size and "
                               "stride (at least one dimension spans across two contiguous "
                               "subspaces). Use .reshape(...) instead.") from None
        return ops.reshape(self, shape)

    def view_as(self, other):
        return self.view(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def flatten(self, start_dim=0, end_dim=-1):
        return ops.flatten(self, start_dim, end_dim)

    def transpose(self, dim0, dim1):
        return ops.transpose(self, dim0, dim1)

    def t(self):
        if self.ndim > 2:
            raise RuntimeError("t() expects a tensor with <= 2 dimensions; use transpose()")
        return ops.named(self.T, "TBackward0", self)

    def permute(self, *dims):
        return ops.permute(self, _shape_arg(dims))

    def squeeze(self, dim=None):
        return ops.squeeze(self, dim)

    def unsqueeze(self, dim):
        return ops.unsqueeze(self, dim)

    def expand(self, *sizes):
        return ops.expand(self, _shape_arg(sizes))

    def expand_as(self, other):
        return ops.expand(self, other.shape)

    def split(self, split_size_or_sections, dim=0):
        return ops.split(self, split_size_or_sections, dim)

    def narrow(self, dim, start, length):
        """A view of `length` entries of dimension `dim` from `start` (negative counts from
        the end), as torch.narrow."""
        dim = _wrap_dim(dim, self.ndim)
        size = self.shape[dim]
        start = int(start)
        if not -size <= start <= size:
            raise IndexError(f"start out of range (expected to be in range of [{-size}, "
                             f"{size}], but got {start})")
        start = start + size if start < 0 else start
        if length < 0 or start + length > size:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                               f"({size}).")
        return self[(slice(None),) * dim + (slice(start, start + length),)]

    def chunk(self, chunks, dim=0):
        return ops.chunk(self, chunks, dim)

    def clone(self):
        return ops.clone(self)

    def contiguous(self):
        return self if self._array.flags.c_contiguous else ops.clone(self, order="C")


# What Tensor's comparison operators take (see Tensor.__eq__).
_OPERANDS = (Tensor, numbers.Number, np.ndarray, np.generic)


def zero_grads(tensors, set_to_none=True):
    """Module.zero_grad and Optimizer.zero_grad: drop each tensor's `.grad`, or with
    `set_to_none=False` fill it with zeros in place."""
    for t in tensors:
        if t.grad is None:
            continue
        if set_to_none:
            t.grad = None
        elif t.grad.is_sparse:
            t.grad.zero_()  # no entries left, as torch's
        else:
            with t.grad.writing() as grad:
                grad.fill(0)


class _Writing:
    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __enter__(self):
        return self.tensor._array

    def __exit__(self, *exc):
        self.tensor._vc[0] += 1


def _init(t, array):
    t._array = array
    init_autograd_state(t)


def init_autograd_state(t):
    """A new tensor's autograd fields: a leaf that needs no gradient, with its own version
    counter (also for tensors without an `_array` of their own, mpigrad.sparse's)."""
    t.requires_grad = False
    t.grad = None
    t.grad_fn = None
    t._output_nr = 0
    t._vc = [0]
    t._base = None
    t._hooks = None
    t._post_accumulate_hooks = None
    t._accumulator = None
    t._retains_grad = False
    t._inference = _grad_state.inference


def _as_array(data, dtype):
    """torch.tensor's dtype rules: arrays keep theirs, Python floats take the default dtype."""
    dtype = dtypes.to_dtype(dtype)
    if isinstance(data, Tensor):
        data = data._array
    if isinstance(data, np.ndarray):
        dtypes.note_half_precision(data.dtype)
        return data if dtype is None or data.dtype == dtype else data.astype(dtype)
    if isinstance(data, np.generic):
        return np.asarray(data, dtype=dtype)
    array = np.asarray(_unwrap_nested(data))
    if dtype is None and array.dtype.kind == "f":
        dtype = dtypes.get_default_dtype()
    if array.dtype.kind in "OUS":
        raise TypeError(f"can't make a tensor from {type(data).__name__} holding "
                        f"{array.dtype} values; expected numbers, bools or nested lists of them")
    return array if dtype is None or array.dtype == dtype else array.astype(dtype)


def _unwrap_nested(data):
    if isinstance(data, Tensor):
        return data._array
    if isinstance(data, (list, tuple)):
        return [_unwrap_nested(d) for d in data]
    return data


def _random_bound(dtype):
    """random_()'s largest draw: every integer up to it is exact in `dtype`."""
    if dtypes.is_floating_point(dtype):
        return int(2 / dtypes.finfo(dtype).eps)  # 2 ** (mantissa bits + 1)
    if dtype.kind == "b":
        return 1
    return int(np.iinfo(dtype).max)


def _wrap_dim(dim, ndim):
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {dim})")
    return dim + ndim if dim < 0 else dim


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)



def to_arguments(where, args, kwargs):
    """The dtype (or None) and `copy` flag of torch's `.to(...)` forms, for `where`
    ("Tensor.to", "Module.to"): `to(dtype)`, `to(device, dtype)`, `to(device=..., dtype=...)`
    and `to(other_tensor)`, each with `non_blocking`, `copy` and `memory_format`. A device
    other than the CPU is an error (see `device.require_cpu`)."""
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "copy", "memory_format"}
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    args = list(args)
    target, dtype = kwargs.get("device"), kwargs.get("dtype")
    first = args[0] if args else None
    if isinstance(first, Tensor):
        args.pop(0)
        target, dtype = first.device, first.dtype
    elif isinstance(first, (str, device)) or (isinstance(first, int)
                                               and not isinstance(first, bool)):
        target = args.pop(0)
        if args and not isinstance(args[0], bool):
            dtype = args.pop(0)
    elif args and not isinstance(first, bool):
        dtype = args.pop(0)
    if len(args) > 2 or any(not isinstance(flag, bool) for flag in args):
        raise TypeError(f"{where}() received an invalid combination of arguments; expected "
                        "(dtype), (device, dtype) or (tensor), then non_blocking and copy")
    if target is not None:
        require_cpu(where, target)
    copy = kwargs.get("copy", args[1] if len(args) > 1 else False)
    return dtype, copy


def is_tensor(obj):
    """Whether `obj` is a Tensor."""
    return isinstance(obj, Tensor)


def numel(input):
    """The number of elements of `input`."""
    return input.numel()


# The layers above Tensor: its operators are ops, its backward() is autograd's. Both build on
# the Tensor class, so they can only be imported once it exists.
from . import autograd, ops  # noqa: E402

# The per-thread grad mode, bound once: every new tensor reads its inference flag.
_grad_state = autograd.grad_mode._State
