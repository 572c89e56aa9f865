"""torch.backends.mkldnn: oneDNN (formerly MKL-DNN), which mpigrad's float32 convolutions and
linear layers' products run on where its wheel is installed (mpigrad/kernels/onednn).
`enabled = False`, or `with flags(enabled=False):`, sends them to the numpy kernels and
numpy's BLAS instead."""
import contextlib
import sys
import types

from ..kernels import onednn

# oneDNN's CPU primitives give the same bits from run to run on a fixed thread count, so this
# flag is kept for scripts that set it and changes nothing.
deterministic = False


def is_available():
    """Whether oneDNN is installed and loads here (`mpigrad.kernels.onednn.unavailable_reason()`
    says why not)."""
    return onednn.unavailable_reason() is None


def set_flags(_enabled=None, _deterministic=None):
    """Sets the flags given (not None); returns the previous ones, as torch's does."""
    global deterministic
    previous = (onednn.is_enabled(), deterministic)
    if _enabled is not None:
        onednn.set_enabled(_enabled)
    if _deterministic is not None:
        deterministic = bool(_deterministic)
    return previous


@contextlib.contextmanager
def flags(enabled=False, deterministic=False):
    """The flags set for the block, restored after it."""
    previous = set_flags(enabled, deterministic)
    try:
        yield
    finally:
        set_flags(*previous)


class _Flags(types.ModuleType):
    """The module's class: `enabled` is a property over the kernels' switch, as torch's."""

    @property
    def enabled(self):
        return onednn.is_enabled()

    @enabled.setter
    def enabled(self, value):
        onednn.set_enabled(value)


sys.modules[__name__].__class__ = _Flags
