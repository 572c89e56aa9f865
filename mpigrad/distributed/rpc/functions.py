"""`rpc.functions.async_execution`, torch's decorator for functions that answer later.

A decorated function returns a Future instead of its result. Run through an RPC (rpc_sync,
rpc_async, remote), the callee replies once that Future completes, and no thread of the
callee's pool waits for it meanwhile: the function may return at once with a Future that
another request completes (a parameter server batching the updates of several trainers), or
that a nested `rpc_async(...).then(...)` completes. Called locally, it returns the Future.
"""
import functools

from ...futures import Future

__all__ = ["async_execution"]


def async_execution(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    # torch marks its wrappers with this attribute; the agent looks for it.
    wrapper._wrapped_async_rpc_function = fn
    return wrapper


def is_async(fn):
    return getattr(fn, "_wrapped_async_rpc_function", None) is not None


class Deferred:
    """What a handler returns for an async function: the reply is its Future's outcome."""

    def __init__(self, future, what):
        if not isinstance(future, Future):
            raise TypeError(f"{what} is decorated with @rpc.functions.async_execution, so it "
                            f"must return a Future, but it returned a "
                            f"{type(future).__name__}")
        self.future = future


def call(func, args, kwargs):
    """func(*args, **kwargs), or a Deferred when func answers later."""
    result = func(*args, **kwargs)
    if is_async(func):
        return Deferred(result, getattr(func, "__qualname__", repr(func)))
    return result
