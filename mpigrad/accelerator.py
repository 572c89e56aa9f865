"""`mpigrad.accelerator`: torch.accelerator's answers on a CPU-only machine. There is no
accelerator, so `current_accelerator()` is None and a script falls back to the CPU."""


def is_available():
    return False


def current_accelerator(check_available=False):
    return None


def device_count():
    return 0


def current_device_index():
    raise RuntimeError("Cannot access accelerator device when none is available. "
                       "mpigrad runs on the CPU only.")


set_device_index = synchronize = current_device_index
