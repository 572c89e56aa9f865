"""Dtypes are numpy's; these names mirror torch's. Python floats become the default dtype."""
import numpy as np

float16 = half = np.dtype(np.float16)
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


def get_default_dtype():
    return _default[0]


def set_default_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"the default dtype must be a floating point type, got {dtype}")
    _default[0] = dtype


def is_floating_point(dtype):
    return np.dtype(dtype).kind == "f"


def to_dtype(dtype):
    return None if dtype is None else np.dtype(dtype)


_TORCH_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double", "int8": "Char",
                "uint8": "Byte", "int16": "Short", "int32": "Int", "int64": "Long",
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
