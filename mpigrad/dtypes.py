"""Dtypes are numpy's; these names mirror torch's. Python floats become the default dtype.

bfloat16 is ml_dtypes' numpy dtype (numpy has none of its own). Its numpy kind is "V", not
"f", so code asks `is_floating_point(dtype)` rather than reading `dtype.kind`.
"""
import builtins

import ml_dtypes
import numpy as np

float16 = half = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = float = np.dtype(np.float32)
float64 = double = np.dtype(np.float64)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
int16 = short = np.dtype(np.int16)
int32 = int = np.dtype(np.int32)
int64 = long = np.dtype(np.int64)
bool = np.dtype(np.bool_)
complex64 = cfloat = np.dtype(np.complex64)
complex128 = cdouble = np.dtype(np.complex128)

_default = [float32]


class layout:
    """torch's memory layouts: `strided` (a dense array) and `sparse_coo` (indices and values,
    mpigrad.sparse's SparseTensor)."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"

    def __reduce__(self):
        return self.name  # one object per layout, as torch's


strided = layout("strided")
sparse_coo = layout("sparse_coo")


def get_default_dtype():
    return _default[0]


def set_default_dtype(dtype):
    dtype = to_dtype(dtype)
    if not is_floating_point(dtype):
        raise TypeError(f"the default dtype must be a floating point type, got {dtype}")
    _default[0] = dtype


# The 16-bit floats, which torch's CPU kernels compute in float32 and round once.
HALF_PRECISION = frozenset({float16, bfloat16})
# Called once each, the first time a half-precision dtype is asked for: ops/autocast.py then
# starts its per-op check, which nothing pays for before.
_on_first_half_precision = []


def is_floating_point(dtype):
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype == bfloat16


def promote_types(type1, type2):
    """torch.promote_types: the smaller dtype both fit in, by torch's table. Unlike numpy's,
    an integer (or bool) with a float is that float (int64 and float32: float32), and float16
    with bfloat16 is float32."""
    type1, type2 = np.dtype(type1), np.dtype(type2)
    if type1 == type2:
        return type1
    floating1, floating2 = is_floating_point(type1), is_floating_point(type2)
    if floating1 != floating2:
        return type1 if floating1 else type2
    if floating1:
        if {type1, type2} == HALF_PRECISION:
            return np.dtype(np.float32)
        return type1 if type1.itemsize > type2.itemsize else type2
    if type1 == np.bool_ or type2 == np.bool_:
        return type2 if type1 == np.bool_ else type1
    return np.promote_types(type1, type2)  # integers: numpy's table is torch's


def _widened(higher, lower):
    """torch's combination of two priority groups' dtypes: the higher group's dtype, unless
    the lower one is of a higher category (bool < integer < float)."""
    if higher is None:
        return lower
    if lower is None or is_floating_point(higher):
        return higher
    if higher == np.bool_ or is_floating_point(lower):
        return promote_types(higher, lower)
    return higher


def operands_result_type(*operands):
    """The dtype torch computes a binary op of these operands in (ndarrays, from tensors, and
    Python numbers), or None for an operand it does not type: tensors with dimensions decide
    first, then 0-d ones, then numbers (an int counts as int64, a float as the default dtype),
    and a later group only lifts the category (a float32 tensor times a float64 0-d tensor
    or an int64 one stays float32)."""
    shaped = scalar = number = None
    for operand in operands:
        if isinstance(operand, np.ndarray):
            if operand.ndim:
                shaped = operand.dtype if shaped is None else promote_types(shaped,
                                                                             operand.dtype)
            else:
                scalar = operand.dtype if scalar is None else promote_types(scalar,
                                                                            operand.dtype)
            continue
        if isinstance(operand, (builtins.bool, np.bool_)):  # this module's bool is a dtype
            kind = np.dtype(np.bool_)
        elif isinstance(operand, (builtins.int, np.integer)):
            kind = np.dtype(np.int64)
        elif isinstance(operand, (builtins.float, np.floating)):
            kind = get_default_dtype()
        else:
            return None
        number = kind if number is None else promote_types(number, kind)
    return _widened(shaped, _widened(scalar, number))


def result_type(tensor1, tensor2):
    """torch.result_type: the dtype an arithmetic op of the two (tensors or numbers) gives."""
    return operands_result_type(*(getattr(x, "_array", x) for x in (tensor1, tensor2)))


def _dtype_argument(where, dtype):
    if not isinstance(dtype, np.dtype):
        raise TypeError(f"{where}(): argument 'type' (position 1) must be torch.dtype, not "
                        f"{type(dtype).__name__}")
    return dtype


class finfo:
    """torch.finfo: the limits of a floating dtype (the default dtype without an argument);
    a complex dtype answers for its real part, as torch's. Every field is a Python number
    and `dtype` the name, as torch's."""

    def __init__(self, type=None):
        dtype = get_default_dtype() if type is None else _dtype_argument("finfo", type)
        if dtype.kind == "c":
            dtype = np.dtype(dtype.char.lower())
        if not is_floating_point(dtype):
            raise TypeError("torch.finfo() requires a floating point input type. Use "
                            "torch.iinfo to handle 'torch.finfo'")
        limits = ml_dtypes.finfo(dtype)
        self.bits = builtins.int(limits.bits)
        self.eps = builtins.float(limits.eps)
        self.max = builtins.float(limits.max)
        self.min = builtins.float(limits.min)
        self.tiny = self.smallest_normal = builtins.float(limits.smallest_normal)
        # torch's resolution is exactly 10 ** -precision (ml_dtypes' bfloat16 one is rounded).
        self.resolution = 10.0 ** -builtins.int(limits.precision)
        self.dtype = dtype.name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """torch.iinfo: the limits of an integer dtype, as Python ints."""

    def __init__(self, type):
        dtype = _dtype_argument("iinfo", type)
        if dtype == bool:
            raise TypeError("torch.bool is not supported by torch.iinfo")
        if dtype.kind not in "iu":
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo "
                            "to handle 'torch.iinfo'")
        limits = np.iinfo(dtype)
        self.bits = builtins.int(limits.bits)
        self.max = builtins.int(limits.max)
        self.min = builtins.int(limits.min)
        self.dtype = dtype.name

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


def is_differentiable(dtype):
    """Floating or complex: the dtypes gradients flow through."""
    return is_floating_point(dtype) or np.dtype(dtype).kind == "c"


def note_half_precision(dtype):
    """Called where dtypes enter (dtype arguments, arrays made into tensors)."""
    if _on_first_half_precision and dtype in HALF_PRECISION:
        while _on_first_half_precision:
            _on_first_half_precision.pop()()


def to_dtype(dtype):
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    note_half_precision(dtype)
    return dtype


_TORCH_NAMES = {"float16": "Half", "bfloat16": "BFloat16", "float32": "Float",
                "float64": "Double", "int8": "Char", "uint8": "Byte", "int16": "Short", "int32": "Int", "int64": "Long",
                "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def torch_name(dtype):
    """The name torch's error messages give `dtype` (Float for float32, Double, Long ...)."""
    return _TORCH_NAMES.get(np.dtype(dtype).name, np.dtype(dtype).name)


def legacy_type_name(dtype):
    """torch's legacy tensor-type name of `dtype`: 'torch.FloatTensor' for float32."""
    return f"torch.{torch_name(dtype)}Tensor"


def from_legacy_type_name(name):
    """The dtype a legacy tensor-type name ('torch.LongTensor', 'LongTensor') stands for.
    A CUDA type name is the error torch's CPU build gives; any other unknown name is a
    ValueError, as in torch."""
    if name.startswith("torch.cuda."):
        raise RuntimeError(f"cannot use {name}: mpigrad runs on the CPU only (torch's CPU "
                           "build cannot initialise CUDA either)")
    short = name[len("torch."):] if name.startswith("torch.") else name
    for numpy_name, torch_short in _TORCH_NAMES.items():
        if short == f"{torch_short}Tensor":
            return np.dtype(numpy_name)
    raise ValueError(f"invalid type: '{name}'")


def check_same_dtype(message, *arrays):
    """Matrix products, convolutions and normalisations refuse operands of different dtypes,
    as torch's do (elementwise ops promote instead); `message` is formatted with the
    torch names of the first two differing dtypes as `{}` and `{}`."""
    dtypes = [a.dtype for a in arrays if a is not None]
    for dtype in dtypes[1:]:
        if dtype != dtypes[0]:
            raise RuntimeError(message.format(torch_name(dtypes[0]), torch_name(dtype)))
