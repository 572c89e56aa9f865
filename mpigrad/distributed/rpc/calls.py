"""Calls that run a function on another worker: rpc_sync and rpc_async, with torch's names.

Each call is shown in an active autograd profiler as torch names it
(`rpc_async#module.fn(worker0 -> worker1)`), from the call until the reply."""
import numbers

from ...autograd import profiler
from .agent import current_agent
from .constants import UNSET_RPC_TIMEOUT

def seconds(timeout):
    """A call's timeout argument as the agent takes it: None for its default, 0 for none."""
    if timeout is None or timeout == UNSET_RPC_TIMEOUT:
        return None
    if not isinstance(timeout, numbers.Real) or timeout < 0:
        raise ValueError(f"timeout must be seconds >= 0 (0: no timeout), got {timeout!r}")
    return float(timeout)


def describe_call(name, func):
    return f"{name}({getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)!s})"


def checked_call(name, func, args, kwargs):
    if not callable(func):
        raise TypeError(f"{name}: func must be callable, got {type(func).__name__}")
    return func, tuple(args or ()), dict(kwargs or {})


def profiled(kind, agent, dest, func, future):
    """`future`, shown as a row of an active autograd profiler until it completes."""
    profile = profiler.active
    if profile is None:
        return future
    name = (f"{kind}#{getattr(func, '__module__', '?')}."
            f"{getattr(func, '__qualname__', func)!s}({agent.info.name} -> "
            f"{agent.workers[dest].name})")
    event = profile.begin(name)
    future.add_done_callback(lambda _done: profile.end(event))
    return future


def rpc_async(to, func, args=None, kwargs=None, timeout=UNSET_RPC_TIMEOUT):
    """Run `func(*args, **kwargs)` on worker `to`; returns a Future of its result."""
    agent = current_agent("rpc_async")
    dest = agent.worker(to).id
    payload = checked_call("rpc_async", func, args, kwargs)
    return profiled("rpc_async", agent, dest, func, agent.request(
        dest, "call", payload, describe_call("rpc", func), seconds(timeout)))


def rpc_sync(to, func, args=None, kwargs=None, timeout=UNSET_RPC_TIMEOUT):
    """Run `func(*args, **kwargs)` on worker `to` and return its result."""
    agent = current_agent("rpc_sync")
    dest = agent.worker(to).id
    payload = checked_call("rpc_sync", func, args, kwargs)
    return profiled("rpc_sync", agent, dest, func, agent.request(
        dest, "call", payload, describe_call("rpc_sync", func), seconds(timeout))).wait()
