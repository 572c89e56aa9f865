"""Constructor argument checks shared by the layers, so every layer words its errors alike.

Like data/_checks.py, each check takes the argument's name first, then its value.
"""
import numbers


def positive_int(name, value, layer):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{layer}: {name} must be a positive integer, got {value!r}")
    return int(value)


def check_device(device, layer):
    if device not in (None, "cpu"):
        raise ValueError(f"{layer}: mpigrad runs on the CPU only; got device={device!r}")
