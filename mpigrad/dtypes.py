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
