"""Argument checks shared by the data modules, so every one words its errors alike.

Like nn/_checks.py, each check takes the argument's name first, then its value.
"""
import numbers


def check_int(name, value, minimum):
    """Return `value` as an int, or raise ValueError unless it is an integer >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} should be an integer >= {minimum}, but got {name}={value!r}")
    return int(value)


def check_bool(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} should be a boolean value, but got {name}={value!r}")
    return value
