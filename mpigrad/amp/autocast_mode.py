"""torch.autocast on the CPU: the context manager and decorator over ops/autocast.py's rules."""
import functools
import warnings

import numpy as np

from .. import dtypes
from ..ops import autocast as _rules

_LOWER_DTYPES = (dtypes.bfloat16, dtypes.float16)


def _check_device(device_type):
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in ("cpu", "cuda"):
        raise RuntimeError(f"User specified an unsupported autocast device_type "
                           f"'{device_type}'")


class autocast:
    """`with autocast("cpu", dtype=bfloat16):` runs matrix products and convolutions in
    `dtype`, losses in float32, as torch's CPU autocast (see ops/autocast.py for the lists).
    Nests; `enabled=False` turns it off inside; also a decorator. Backward runs in the dtypes
    the forward chose, whether or not it is inside the block, as in torch."""

    def __init__(self, device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
        _check_device(device_type)
        self.device = device_type
        if device_type == "cuda":
            # torch's answer on a machine without CUDA: a warning, and float32 as before.
            if enabled:
                warnings.warn("CUDA is not available or torch_xla is imported. Disabling "
                              "autocast.", stacklevel=2)
            enabled = False
        self.fast_dtype = dtypes.bfloat16 if dtype is None else dtypes.to_dtype(dtype)
        if enabled and self.fast_dtype not in _LOWER_DTYPES:
            warnings.warn(
                "In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                "CPU Autocast only supports dtype of torch.bfloat16, torch.float16 currently.",
                stacklevel=2)
            enabled = False
        self._enabled = bool(enabled)
        self._cache_enabled = cache_enabled
        self._previous = []

    def __enter__(self):
        self._previous.append(_rules.enable(self.fast_dtype if self._enabled else None,
                                            self._cache_enabled))
        return self

    def __exit__(self, *exc):
        _rules.restore(self._previous.pop())
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            with self:
                return function(*args, **kwargs)
        return run


def is_autocast_available(device_type):
    return device_type == "cpu"


def is_autocast_enabled(device_type=None):
    """torch's forms: `is_autocast_enabled()` asks about CUDA (never on here), and
    `is_autocast_enabled("cpu")` about the CPU."""
    return device_type == "cpu" and _rules.state.dtype is not None


def is_autocast_cpu_enabled():
    return _rules.state.dtype is not None


def get_autocast_dtype(device_type):
    _check_device(device_type)
    if device_type == "cuda":
        return dtypes.float16  # torch's CUDA default; CUDA autocast is never on here
    return _rules.state.dtype or _default_dtype[0]


def get_autocast_cpu_dtype():
    return get_autocast_dtype("cpu")


def set_autocast_dtype(device_type, dtype):
    _check_device(device_type)
    _default_dtype[0] = np.dtype(dtype)


# What get_autocast_dtype answers outside any region: torch's CPU default.
_default_dtype = [dtypes.bfloat16]


def custom_fwd(fwd=None, *, device_type="cpu", cast_inputs=None):
    """torch.amp.custom_fwd: with `cast_inputs`, the function runs with autocast off and its
    floating tensor arguments cast to that dtype while autocast is on."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def run(*args, **kwargs):
        if cast_inputs is None or _rules.state.dtype is None:
            return fwd(*args, **kwargs)
        with autocast(device_type, enabled=False):
            args = [a.to(cast_inputs) if hasattr(a, "is_floating_point") and a.is_floating_point()
                    else a for a in args]
            return fwd(*args, **kwargs)
    return run


def custom_bwd(bwd=None, *, device_type="cpu"):
    """torch.amp.custom_bwd: backward already runs outside autocast here."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
