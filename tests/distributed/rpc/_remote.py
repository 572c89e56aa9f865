"""Functions the tests call remotely: defined at module level so they travel by name."""
import threading
import time
import weakref

import numpy as np

import mpigrad as mg
import mpigrad.distributed.rpc as rpc

state = {}


def identity(*values):
    return values if len(values) != 1 else values[0]


def add(a, b=0, *, scale=1):
    return (a + b) * scale


def whoami():
    return rpc.get_worker_info().name


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def raise_value_error(message):
    raise ValueError(message)


def raise_custom():
    raise CustomError("a", 3)


class CustomError(Exception):
    """Built from two arguments, so it cannot be rebuilt from one message string."""

    def __init__(self, name, count):
        super().__init__(f"{name} failed {count} times")


def call_back(to, func, args):
    """A nested call: this worker calls `to` while serving a request."""
    return rpc.rpc_sync(to, func, args=args)


def set_event_later(name):
    event = state.setdefault(name, threading.Event())
    event.set()
    return True


def wait_for_event(name, timeout):
    event = state.setdefault(name, threading.Event())
    return event.wait(timeout)


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, amount):
        self.value += amount
        return self.value

    def get(self):
        return self.value


def make_tracked(key):
    """A value whose death the owner can observe through a weak reference."""
    value = Counter(0)
    state[key] = weakref.ref(value)
    return value


def is_alive(key):
    return state[key]() is not None


def owned_count():
    from mpigrad.distributed.rpc import rref
    return rref.owned_count()


def context_count():
    from mpigrad.distributed.autograd import contexts
    return contexts.count()


def to_here_of(rref):
    return rref.to_here()


def rref_owner_and_value(rref):
    return rref.owner_name(), rref.to_here().value, rref.is_owner()


def wrap_in_rref(value):
    return rpc.RRef(value)


def array_sum(a):
    return np.asarray(a).sum()


def tensor_info(t):
    return type(t).__name__, t.dtype.str, tuple(t.shape), t.requires_grad


def scaled(t, factor):
    return t * factor


def random_tensor(seed, shape):
    return mg.from_numpy(np.random.default_rng(seed).standard_normal(shape))
