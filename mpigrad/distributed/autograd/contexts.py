"""Distributed autograd contexts: what one forward/backward pass left on this worker.

A context is created by `with dist_autograd.context() as context_id:` on one worker and,
implicitly, on every worker an RPC made inside it reaches (the id travels with the message,
and a request runs on the server with the same context current). Each worker's context keeps
the send and recv functions recorded there, the workers it exchanged messages with (so the
backward and the clean-up reach everyone), the gradients accumulated for its leaves, and a
mailbox where gradients for its send functions arrive during backward.
"""
import contextlib
import itertools
import threading

import numpy as np

_lock = threading.Lock()
_contexts = {}
_state = threading.local()  # .context_id: the context current on this thread
_counter = itertools.count(1)
_RANK_SHIFT = 48  # context and send ids: (creator rank << 48) + a local counter


class DistAutogradContext:
    def __init__(self, context_id):
        self.id = context_id
        self.cond = threading.Condition()
        self.sends = {}      # send_id -> (the send function's node, the worker it sent to)
        self.recvs = []      # recv functions' nodes, in creation order
        self.workers = set()  # ranks this context exchanged messages with
        self.grads = {}      # leaf tensor -> accumulated gradient (a Tensor)
        self.mailbox = {}    # (round, send_id) -> gradients that arrived for it (or an error)
        self.arrived = set()  # (round, send_id) of the gradients that arrived
        self.round = 0       # the last backward pass this worker took part in

    def accumulate(self, tensor, grad):
        with self.cond:
            current = self.grads.get(tensor)
            if current is None:
                self.grads[tensor] = grad.detach().clone() if grad.requires_grad else grad
            else:
                np.add(current._array, grad._array, out=current._array)


def new_id(rank):
    return (rank << _RANK_SHIFT) + next(_counter)


def create(context_id):
    with _lock:
        if context_id in _contexts:
            raise RuntimeError(f"distributed autograd context {context_id} already exists")
        context = _contexts[context_id] = DistAutogradContext(context_id)
        return context


def get_or_create(context_id):
    with _lock:
        context = _contexts.get(context_id)
        if context is None:
            context = _contexts[context_id] = DistAutogradContext(context_id)
        return context


def find(context_id):
    with _lock:
        return _contexts.get(context_id)


def retrieve(context_id):
    context = find(context_id)
    if context is None:
        raise RuntimeError(f"no distributed autograd context {context_id} on this worker: it "
                           f"was never created here, or it has already ended")
    return context


def pop(context_id):
    with _lock:
        return _contexts.pop(context_id, None)


def count():
    """How many contexts this worker holds (leak checks)."""
    with _lock:
        return len(_contexts)


def reset():
    with _lock:
        _contexts.clear()


def current_id():
    return getattr(_state, "context_id", None)


@contextlib.contextmanager
def running_in(context_id):
    """Make `context_id` (or None) the current context of this thread for the block."""
    previous = getattr(_state, "context_id", None)
    _state.context_id = context_id
    try:
        yield
    finally:
        _state.context_id = previous
