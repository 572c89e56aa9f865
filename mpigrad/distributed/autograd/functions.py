"""The send/recv pair recorded where tensors that require grad cross workers in a context.

On the sending worker, the tensors of one message that require grad go through `Send`, a
custom autograd Function whose node is never reached from a local loss: it is a root of the
backward on this worker, and its backward waits for the gradients the receiving worker sends
back. On the receiving worker the tensors come out of one `RecvBackward` node, a leafless
node whose gradient is sent back to the sender's `Send`. So the local engine runs each
worker's share of the graph; the messages between the two nodes stitch the shares together.
"""
import time

import numpy as np

from ...autograd import Function
from ...autograd.graph import Node
from ...tensor import Tensor
from ..rpc.agent import RpcTimeoutError, current_agent
from . import contexts

_WAIT_SLICE = 0.05  # seconds


class Send(Function):
    @staticmethod
    def forward(ctx, context, send_id, peer, *tensors):
        ctx.set_materialize_grads(False)  # its gradients come from the peer, not from outputs
        ctx.context, ctx.send_id, ctx.peer = context, send_id, peer
        return tensors

    @staticmethod
    def backward(ctx, *unused):
        return (None, None, None) + await_gradients(ctx.context, ctx.send_id, ctx.peer,
                                                           len(unused))


class RecvBackward(Node):
    __slots__ = ("context", "sender", "send_id", "layouts", "placeholder", "answered")

    def __init__(self, context, sender, send_id, layouts):
        super().__init__(())
        self.context, self.sender, self.send_id, self.layouts = context, sender, send_id, layouts
        # Each backward pass seeds this node with `placeholder`, so the engine runs it (and
        # it answers its sender) even when the loss does not use its tensors.
        self.placeholder = Tensor.wrap(np.zeros((), np.dtype(layouts[0][1])))
        self.answered = 0  # the last pass in which the sender got our answer

    @property
    def num_outputs(self):
        return len(self.layouts)

    def apply(self, grad_outputs):
        grads = [None if g is self.placeholder else g for g in grad_outputs]
        send_gradients(self, grads, None)
        return []


def send_gradients(node, grads, error):
    """Answer the send function behind `node` (a recv function) for the current pass. No
    acknowledgement: the receiver answers its `dist_backward` only once every gradient
    addressed to it has arrived (see `drain`), which is what the sender waits for."""
    context = node.context
    agent = current_agent("distributed backward")
    node.answered = context.round
    with contexts.running_in(None):
        agent.notify(node.sender, "dist_grad",
                     (context.id, context.round, node.send_id, grads, error),
                     "distributed backward (gradients)")


def await_gradients(context, send_id, peer, count):
    with context.cond:
        key = context.round, send_id
    _wait(lambda: key in context.mailbox, lambda: (peer,))
    with context.cond:
        grads, error = context.mailbox.pop(key)
    if error is not None:
        agent = current_agent("distributed backward")
        raise RuntimeError(f"distributed backward failed on {agent.describe(peer)}: {error}")
    return tuple(grads) if grads is not None else (None,) * count


def drain(context, round_):
    """Wait until the gradients of every send function of the context have arrived in pass
    `round_` (after an error, some were never awaited: each recv function answers its
    sender even then), and forget them, even if the wait fails: none outlives the pass.
    Gradients are filed by pass, so one arriving after a failed pass gave up on it is never
    taken for the next pass's."""
    def missing():
        with context.cond:
            return [peer for send_id, (_, peer) in context.sends.items()
                    if (round_, send_id) not in context.arrived]
    try:
        _wait(lambda: not missing(), missing)
    finally:
        with context.cond:
            for key in [k for k in context.mailbox if k[0] <= round_]:
                del context.mailbox[key]
            context.arrived = {k for k in context.arrived if k[0] > round_}


def _wait(ready, peers):
    """Wait until `ready()`, receiving messages on this thread meanwhile (the gradients it
    waits for then need no other thread to wake up for them), in slices, so that one of
    `peers()` leaving, or this agent stopping, ends the wait at once; within the agent's
    timeout."""
    agent = current_agent("distributed backward")
    deadline = time.monotonic() + agent.timeout if agent.timeout else None
    while not agent.receive_until(ready, _WAIT_SLICE):
        waiting_for = peers()
        for peer in waiting_for:
            agent.check_reachable(peer, "distributed backward")
        if deadline is not None and time.monotonic() > deadline:
            raise RpcTimeoutError(
                f"distributed backward: no gradients from "
                f"{', '.join(agent.describe(p) for p in sorted(set(waiting_for)))} for a "
                f"tensor sent there within {agent.timeout:g} s")
