"""torch.backends.cuda's switches (`matmul.allow_tf32`, the scaled-dot-product kernels), which
scripts set at their top, and `torch.set_float32_matmul_precision`, which is the same switch
by another name. There is no CUDA in mpigrad: the flags keep torch's defaults, accept torch's
values and change nothing, as torch's CPU build computes float32 matmuls in full precision
whatever they say."""
import warnings

_PRECISIONS = ("highest", "high", "medium")


class _MatmulFlags:
    """`matmul.allow_tf32` and its siblings: settable to a bool, as torch's; any other name is
    torch's AttributeError, so a misspelt flag is not silently ignored."""
    # allow_tf32 is not among them: torch keeps it as the float32 matmul precision
    # (True is "high", False "highest"), so the two names always agree.
    _DEFAULTS = {"allow_fp16_reduced_precision_reduction": True,
                 "allow_bf16_reduced_precision_reduction": True,
                 "allow_fp16_accumulation": False}

    def __init__(self):
        object.__setattr__(self, "_values", dict(self._DEFAULTS))
        object.__setattr__(self, "_precision", "highest")

    def __getattr__(self, name):
        if name == "allow_tf32":
            return self._precision != "highest"
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"Unknown attribute {name}") from None

    def __setattr__(self, name, value):
        if name not in self._values and name != "allow_tf32":
            raise AttributeError(f"Unknown attribute {name}")
        if not isinstance(value, bool):
            raise RuntimeError(f"{name} expects a bool, but got {type(value).__name__}")
        if name == "allow_tf32":
            object.__setattr__(self, "_precision", "high" if value else "highest")
        else:
            self._values[name] = value


matmul = _MatmulFlags()


def set_float32_matmul_precision(precision):
    """torch.set_float32_matmul_precision: "highest" (the default), "high" or "medium". Kept
    and read back, with no effect on the CPU, as in torch; any other string is ignored with
    torch's warning, anything but a string is torch's RuntimeError."""
    if not isinstance(precision, str):
        raise RuntimeError(f"set_float32_matmul_precision expects a str, but got "
                           f"{type(precision).__name__}")
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      f"setFloat32MatmulPrecision call has no effect.", UserWarning, stacklevel=2)
        return
    object.__setattr__(matmul, "_precision", precision)


def get_float32_matmul_precision():
    """The precision set_float32_matmul_precision (or matmul.allow_tf32) last chose."""
    return matmul._precision

# torch's switches for its scaled-dot-product attention kernels, kept and reported; mpigrad
# has one CPU kernel (block by block, ops/attention.py), which runs whatever they say.
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built():
    return False


def enable_flash_sdp(enabled):
    _sdp["flash"] = bool(enabled)


def flash_sdp_enabled():
    return _sdp["flash"]


def enable_mem_efficient_sdp(enabled):
    _sdp["mem_efficient"] = bool(enabled)


def mem_efficient_sdp_enabled():
    return _sdp["mem_efficient"]


def enable_math_sdp(enabled):
    _sdp["math"] = bool(enabled)


def math_sdp_enabled():
    return _sdp["math"]


def enable_cudnn_sdp(enabled):
    _sdp["cudnn"] = bool(enabled)


def cudnn_sdp_enabled():
    return _sdp["cudnn"]
