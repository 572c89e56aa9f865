"""Anomaly detection: name the op whose backward produced NaN or Inf, and where it was created."""
import traceback


class _State:
    enabled = False


def is_anomaly_enabled():
    return _State.enabled


class detect_anomaly:
    """Context manager: record each op's creation stack and check every backward result."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        self._prev = _State.enabled
        _State.enabled = self.check_nan
        return self

    def __exit__(self, *exc):
        _State.enabled = self._prev
        return False


class set_detect_anomaly(detect_anomaly):
    """Sets the mode when called; used as a context manager, restores the mode from before
    the call on leaving (as torch's)."""

    def __init__(self, mode):
        super().__init__(check_nan=mode)
        super().__enter__()

    def __enter__(self):
        # The mode was set when this was made; entering again would record that as "before".
        return self


def creation_stack():
    return "".join(traceback.format_stack()[:-3])
