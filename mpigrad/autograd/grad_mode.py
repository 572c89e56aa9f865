"""Grad modes: whether operations record the graph, per thread.

As in torch, the mode belongs to the thread that runs the ops: a forward on one thread records
its graph while another thread runs backward (which switches grad mode off for itself only),
and every new thread starts with grad enabled. Ops read `_State.enabled` directly: one
attribute of a `threading.local`, so the per-op cost stays a dictionary lookup.
"""
import functools
import threading


class _ThreadState(threading.local):
    # Class attributes are every thread's starting values; assignments are per thread.
    enabled = True
    inference = False
    # The innermost active (pack, unpack) pair of saved_tensors_hooks, and the error to raise
    # while disable_saved_tensors_hooks is in force.
    saved_tensors_hooks = None
    saved_tensors_hooks_disabled = None


_State = _ThreadState()


def is_grad_enabled():
    return _State.enabled


def is_inference_mode_enabled():
    return _State.inference


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


class inference_mode(_ModeContext):
    """`no_grad` for code that will never be differentiated (evaluation, serving).

    mpigrad's no_grad already skips all autograd bookkeeping, so the two cost the same;
    `inference_mode(False)` inside it re-enables recording, as torch's does.
    `is_inference_mode_enabled()` tells which one is active. Tensors made inside are
    inference tensors (`is_inference()`), as torch's: outside inference mode they may not be
    saved for backward nor updated in place (clone one to get a normal tensor).
    """

    def __new__(cls, mode=True):
        if callable(mode):  # used as a bare decorator: @inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode=True):
        self._inference = bool(mode)

    def _mode(self):
        return not self._inference

    def _args(self):
        return (self._inference,)

    def __enter__(self):
        self._prev_inference = _State.inference
        _State.inference = self._inference
        return super().__enter__()

    def __exit__(self, *exc):
        _State.inference = self._prev_inference
        return super().__exit__(*exc)
