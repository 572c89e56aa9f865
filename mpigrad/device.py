"""`mpigrad.device`: torch.device's value type. Only the CPU exists in mpigrad, but naming
another device is not an error (scripts build `device("cuda")` before checking for it); using
one is, where a tensor or module is moved to it."""
import numbers

# Device types torch parses; naming them is allowed, running on any but "cpu" is not.
_TYPES = ("cpu", "cuda", "mps", "xpu", "hip", "meta", "xla", "hpu", "mtia", "privateuseone")


class device:
    """A device: `type` ("cpu", "cuda", ...) and an optional `index`.

    `device("cpu")`, `device("cuda:1")`, `device("cuda", 1)`, `device(other)`.
    A bare integer means the current accelerator's device `n` in torch; there is none here,
    so it is the same error torch gives on a CPU-only machine.
    """
    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, numbers.Integral) and not isinstance(type, bool):
            if type < 0:
                raise RuntimeError("Device index must not be negative")
            raise RuntimeError("Cannot access accelerator device when none is available. "
                               "mpigrad runs on the CPU only: use 'cpu'.")
        elif not isinstance(type, str):
            raise TypeError(f"device() expects a string, a device or an int, got "
                            f"{type.__class__.__name__}")
        else:
            name, _, text_index = type.partition(":")
            if name not in _TYPES:
                raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start "
                                   f"of device string: {type}")
            if text_index:
                if index is not None:
                    raise RuntimeError(f"type (string) must not include an index because index "
                                       f"was passed explicitly: {type}")
                if not text_index.isdigit():
                    raise RuntimeError(f"Invalid device string: '{type}'")
                index = int(text_index)
            type = name
        if index is not None and index < 0:
            raise RuntimeError("Device index must not be negative")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)

    def __setattr__(self, name, value):
        raise AttributeError(f"device.{name} is read-only")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{index})"

    def __eq__(self, other):
        return (isinstance(other, device) and self.type == other.type
                and self.index == other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        return device, (self.type, self.index)


CPU = device("cpu")


def require_cpu(where, target):
    """`target` (a device, a device string or index) as a device, or an error naming `where`
    and saying mpigrad has only the CPU."""
    resolved = target if isinstance(target, device) else device(target)
    if resolved.type != "cpu":
        # torch without CUDA raises AssertionError for "cuda"; the same type, our words.
        # torch's CPU build says "Torch not compiled with CUDA enabled"; scripts look for it.
        error = AssertionError if resolved.type == "cuda" else RuntimeError
        prefix = "Torch not compiled with CUDA enabled: " if resolved.type == "cuda" else ""
        raise error(f"{where}: {prefix}mpigrad runs on the CPU only and cannot move to "
                    f"'{resolved}' (torch.cuda.is_available() is False here too); "
                    "use 'cpu', or pick the device with "
                    "'cuda' if mpigrad.cuda.is_available() else 'cpu'")
    return resolved

