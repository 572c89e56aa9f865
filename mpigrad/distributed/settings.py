"""Environment settings the distributed layer reads, checked once with a clear error: a typo
or `nan` in a timeout must not turn into a job that never times out."""
import math
import os


def seconds(name, default, zero_allowed=False):
    """The environment variable `name` as a finite number of seconds, > 0 (or 0 where that
    means "off"); `default` when unset. ValueError naming the variable otherwise."""
    text = os.environ.get(name)
    if text is None:
        return float(default)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed):
        expected = "a finite number of seconds >= 0 (0 turns it off)" if zero_allowed else \
            "a finite number of seconds > 0"
        raise ValueError(f"{name} must be {expected}, got {text!r}")
    return value
