"""Grad modes: whether operations record the graph.

A module-level flag rather than a thread-local: mpigrad runs one training loop per
process (MPI gives the parallelism), and the flag is read on every op.
"""
import functools


class _State:
    enabled = True


def is_grad_enabled():
    return _State.enabled


class _ModeContext:
    """Base for the mode switches: usable as a context manager and as a decorator."""

    def _mode(self):
        raise NotImplementedError

    def __enter__(self):
        self._prev = _State.enabled
        _State.enabled = self._mode()
        return self

    def __exit__(self, *exc):
        _State.enabled = self._prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args()):
                return fn(*args, **kwargs)
        return wrapper

    def _args(self):
        return ()


class no_grad(_ModeContext):
    def _mode(self):
        return False


class enable_grad(_ModeContext):
    def _mode(self):
        return True


class set_grad_enabled(_ModeContext):
    """Sets the mode at construction (like torch), so a bare call works as a function too."""

    def __init__(self, mode):
        self._enabled = bool(mode)
        self._prev = _State.enabled
        _State.enabled = self._enabled

    def __enter__(self):
        return self

    def _mode(self):
        return self._enabled

    def _args(self):
        return (self._enabled,)

    def __call__(self, fn):
        # The constructor already switched the mode; as a decorator it must not leak.
        _State.enabled = self._prev
        return super().__call__(fn)
