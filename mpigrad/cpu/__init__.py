"""torch.cpu: the CPU's own names (torch.cpu.amp)."""
from . import amp  # noqa: F401


def is_available():
    return True


def device_count():
    return 1
