"""Tensor factories, with torch's names, dtype rules and `device=` argument (the CPU only:
another device is the error torch's CPU build gives), and torch's legacy typed constructors
(`LongTensor`, `FloatTensor`, ...)."""
import numpy as np

from . import dtypes, random
from .device import device as device_type, require_cpu
from .tensor import Tensor


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _finish(array, requires_grad, device, where):
    if device is not None:
        require_cpu(where, device)
    t = Tensor.wrap(array)
    return t.requires_grad_(True) if requires_grad else t


def _float(dtype):
    return dtypes.get_default_dtype() if dtype is None else dtypes.to_dtype(dtype)


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of `data` (arrays keep their dtype, Python floats become
    the default dtype, Python ints int64)."""
    return _finish(np.array(Tensor(data, dtype=dtype)._array, copy=True), requires_grad, device,
                   "tensor")


def as_tensor(data, dtype=None, device=None):
    """Like `tensor`, but shares memory with an ndarray or Tensor when the dtype allows."""
    if device is not None:
        require_cpu("as_tensor", device)
    if isinstance(data, Tensor) and (dtype is None or data.dtype == np.dtype(dtype)):
        return data
    return Tensor(data, dtype=dtype)


def from_numpy(array):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects an np.ndarray, got {type(array).__name__}")
    dtypes.note_half_precision(array.dtype)
    return Tensor.wrap(array)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return _finish(np.zeros(_shape(size), _float(dtype)), requires_grad, device, "zeros")


def ones(*size, dtype=None, device=None, requires_grad=False):
    return _finish(np.ones(_shape(size), _float(dtype)), requires_grad, device, "ones")


def empty(*size, dtype=None, device=None, requires_grad=False):
    return _finish(np.empty(_shape(size), _float(dtype)), requires_grad, device, "empty")


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if dtype is None:
        dtype = Tensor(fill_value).dtype
    return _finish(np.full(_shape((size,)), fill_value, dtype), requires_grad, device, "full")


def zeros_like(input, dtype=None, device=None, requires_grad=False):
    return _finish(np.zeros(input.shape, dtype or input.dtype), requires_grad, device,
                   "zeros_like")


def ones_like(input, dtype=None, device=None, requires_grad=False):
    return _finish(np.ones(input.shape, dtype or input.dtype), requires_grad, device,
                   "ones_like")


def empty_like(input, dtype=None, device=None, requires_grad=False):
    return _finish(np.empty(input.shape, dtype or input.dtype), requires_grad, device,
                   "empty_like")


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False):
    return _finish(np.full(input.shape, fill_value, dtype or input.dtype), requires_grad,
                   device, "full_like")


def _random_float_dtype(where, dtype):
    """torch draws normal and uniform values only into floating tensors."""
    dtype = np.dtype(dtype)
    if not dtypes.is_differentiable(dtype):
        raise NotImplementedError(f"{where}: \"{where}_kernel_cpu\" not implemented for "
                                  f"'{dtypes.torch_name(dtype)}'")
    return dtype


def randn_like(input, dtype=None, device=None, requires_grad=False, generator=None):
    dtype = _random_float_dtype("normal", dtype or input.dtype)
    return _finish(random.normal_array(input.shape, 0.0, 1.0, dtype, generator), requires_grad,
                   device, "randn_like")


def rand_like(input, dtype=None, device=None, requires_grad=False, generator=None):
    dtype = _random_float_dtype("uniform", dtype or input.dtype)
    return _finish(random.uniform_array(input.shape, 0.0, 1.0, dtype, generator),
                   requires_grad, device, "rand_like")


def randint_like(input, low=0, high=None, dtype=None, device=None, requires_grad=False,
                 generator=None):
    """torch.randint_like(input, high) or (input, low, high): input's shape and dtype."""
    if high is None:
        low, high = 0, low
    array = random_integers("randint_like", low, high, input.shape, dtype or input.dtype,
                            generator)
    return _finish(array, requires_grad, device, "randint_like")


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    array = np.arange(start, end, step)
    if dtype is None and array.dtype.kind == "f":
        dtype = dtypes.get_default_dtype()
    return _finish(array.astype(dtype) if dtype is not None else array, requires_grad, device,
                   "arange")


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    return _finish(np.linspace(start, end, steps).astype(_float(dtype)), requires_grad, device,
                   "linspace")


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    return _finish(np.eye(n, m, dtype=_float(dtype)), requires_grad, device, "eye")


def randn(*size, dtype=None, generator=None, device=None, requires_grad=False):
    return _finish(random.normal_array(_shape(size), 0.0, 1.0, dtype, generator), requires_grad,
                   device, "randn")


def rand(*size, dtype=None, generator=None, device=None, requires_grad=False):
    return _finish(random.uniform_array(_shape(size), 0.0, 1.0, dtype, generator),
                   requires_grad, device, "rand")


def random_integers(where, low, high, shape, dtype, generator):
    """Integers drawn uniformly from [low, high), as `dtype`, with torch's check of the
    bounds (random_, randint and randint_like share it)."""
    if low >= high:
        raise RuntimeError(f"{where}: random_ expects 'from' to be less than 'to', but got "
                           f"from={low} >= to={high}")
    return random.integers_array(low, high, shape, dtype, generator)


def randint(*bounds, size=None, low=None, high=None, generator=None, dtype=None, device=None,
            requires_grad=False):
    """torch.randint's forms: `randint(high, size)`, `randint(low, high, size)`, any of them by
    keyword; `size` is a tuple (or list) of ints. int64 unless `dtype` says otherwise."""
    bounds = list(bounds)
    if size is None:
        if not bounds or not isinstance(bounds[-1], (tuple, list)):
            raise TypeError("randint(): argument 'size' must be tuple of ints, got "
                            f"{type(bounds[-1]).__name__ if bounds else 'nothing'}")
        size = bounds.pop()
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"randint(): argument 'size' must be tuple of ints, not "
                        f"{type(size).__name__}")
    if len(bounds) == 2:
        low, high = bounds
    elif len(bounds) == 1:
        if high is None:
            high = bounds[0]
        else:
            low = bounds[0]
    elif len(bounds) > 2:
        raise TypeError("randint() takes at most low, high and size")
    if high is None:
        raise TypeError("randint() missing required argument 'high'")
    array = random_integers("randint", 0 if low is None else int(low), int(high),
                            _shape((size,)), dtype or dtypes.int64, generator)
    return _finish(array, requires_grad, device, "randint")


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    array = random.permutation_array(n, generator)
    return _finish(array if dtype is None else array.astype(dtype), requires_grad, device,
                   "randperm")


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """torch.multinomial: `num_samples` category indices per row of `input` (1-D or 2-D
    non-negative weights, not necessarily summing to one), int64."""
    weights = input._array if isinstance(input, Tensor) else np.asarray(input)
    return Tensor.wrap(random.multinomial_array(weights, num_samples, replacement, generator))


class _LegacyType(type):
    """The metaclass of the legacy constructors: `isinstance(t, LongTensor)` asks whether t
    is a Tensor of that dtype, as torch's legacy types answer."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __call__(cls, *args, device=None):
        """`LongTensor(2, 3)`: an uninitialised (here: zero) tensor of that shape;
        `LongTensor([1, 2])`: one holding the data; `LongTensor(t)`: t itself when its dtype
        matches (torch refuses another dtype); `LongTensor()`: an empty one."""
        if device is not None and device_type(device).type != "cpu":
            raise RuntimeError(f"legacy constructor expects device type: cpu but device type: "
                               f"{device_type(device).type} was passed")
        if not args:
            return Tensor.wrap(np.zeros((0,), cls.dtype))
        if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
            return Tensor.wrap(np.zeros(tuple(int(a) for a in args), cls.dtype))
        if len(args) == 1 and isinstance(args[0], Tensor):
            if args[0].dtype != cls.dtype:
                raise TypeError(f"expected {dtypes.torch_name(cls.dtype)} (got "
                                f"{dtypes.torch_name(args[0].dtype)})")
            return args[0]
        if len(args) == 1 and isinstance(args[0], (list, tuple, np.ndarray)):
            return tensor(args[0], dtype=cls.dtype)
        raise TypeError(f"new(): data must be a sequence (got {type(args[0]).__name__})")


def _legacy(dtype):
    name = dtypes.legacy_type_name(dtype)[len("torch."):]
    return _LegacyType(name, (), {"dtype": dtype, "__module__": "mpigrad"})


FloatTensor = _legacy(dtypes.float32)
DoubleTensor = _legacy(dtypes.float64)
HalfTensor = _legacy(dtypes.float16)
LongTensor = _legacy(dtypes.int64)
IntTensor = _legacy(dtypes.int32)
ShortTensor = _legacy(dtypes.int16)
CharTensor = _legacy(dtypes.int8)
ByteTensor = _legacy(dtypes.uint8)
BoolTensor = _legacy(dtypes.bool)
