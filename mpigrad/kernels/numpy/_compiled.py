"""The numpy backend's door to the compiled loops (kernels/compiled/), imported on first use.

The loops are written for contiguous 1-d float32 or float64 arrays; `flat` and `fresh`
bring any array there (a copy only when the input is strided or of another dtype), and
`loops` imports a module of loops, and with it numba, the first time a kernel needs it.
"""
import importlib

import numpy as np

_modules = {}


def loops(name):
    module = _modules.get(name)
    if module is None:
        # Imported here, not at the top: numba's import costs about 0.3 s, which `import
        # mpigrad` must not pay, and a kernel compiles (or loads from cache) on first use.
        module = _modules[name] = importlib.import_module(f"mpigrad.kernels.compiled.{name}")
    return module


def compute_dtype(dtype):
    """The dtype a loop runs in: float64 as is, every other float type through float32."""
    return np.float64 if dtype == np.float64 else np.float32


def flat(array, dtype=None):
    """`array` as a contiguous 1-d array of `dtype` (its own compute dtype by default)."""
    return np.ascontiguousarray(array, dtype or compute_dtype(array.dtype)).reshape(-1)


def fresh(shape, dtype):
    return np.empty(shape, compute_dtype(dtype))


def result(out, dtype):
    """A loop's output in the op's dtype (float16 and bfloat16 were computed in float32)."""
    return out if out.dtype == dtype else out.astype(dtype)
