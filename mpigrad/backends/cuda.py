"""torch.backends.cuda's switches (`matmul.allow_tf32`, the scaled-dot-product kernels), which
scripts set at their top. There is no CUDA in mpigrad: the flags keep torch's defaults,
accept torch's values and change nothing."""


class _MatmulFlags:
    """`matmul.allow_tf32` and its siblings: settable to a bool, as torch's; any other name is
    torch's AttributeError, so a misspelt flag is not silently ignored."""
    _DEFAULTS = {"allow_tf32": False, "allow_fp16_reduced_precision_reduction": True,
                 "allow_bf16_reduced_precision_reduction": True,
                 "allow_fp16_accumulation": False}

    def __init__(self):
        object.__setattr__(self, "_values", dict(self._DEFAULTS))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"Unknown attribute {name}") from None

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError(f"Unknown attribute {name}")
        if not isinstance(value, bool):
            raise RuntimeError(f"{name} expects a bool, but got {type(value).__name__}")
        self._values[name] = value


matmul = _MatmulFlags()

# Which scaled-dot-product attention kernels may run; mpigrad has one (the math one).
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
