"""The distributed backward pass (PyTorch's FAST mode), on top of the local engine.

`backward(context_id, roots)` on one worker starts a pass on every worker the context
reached: it sends `dist_backward` to the workers it exchanged messages with, each of which
forwards it to its own peers once (a flood over the context's workers). On each worker the
pass is ONE run of the local engine whose roots are the local loss (on the first worker),
every send function of the context and every recv function of the context:

- A send function's backward blocks until its peer's gradients arrive in the context's
  mailbox. The engine runs ready nodes newest first, and every node that can feed a
  gradient back to a send function was created after it (causality through the messages),
  so by the time a send function runs, everything on this worker its peer may be waiting
  for has run. Several sends sharing part of the graph are therefore counted together by
  the engine, and a shared node runs once, with the sum.
- A recv function is seeded with a placeholder gradient, so the engine runs it even when
  the loss does not use its tensors; it always answers its sender (gradients, or "none",
  or the error that stopped this worker's pass), so no send function waits forever.
- Leaves' gradients are captured, not accumulated: they go into the context
  (`get_gradients`), never into `.grad`.

A worker answers `dist_backward` once its own pass is done and the workers it forwarded to
have answered, so the first worker's `backward` returns when every worker has finished.
Gradients travel as RPC requests without a reply (`dist_grad`) that the receiving thread
files into the mailbox; a worker's pass ends only when every gradient addressed to it has
arrived, so its answer to `dist_backward` acknowledges them all at once.
"""
import sys

import numpy as np

from ...autograd.engine import run_backward
from ...autograd.graph import AccumulateGrad, gradient_edge, reachable
from ...autograd.profiler import record_function
from ...tensor import Tensor
from ..rpc.agent import current_agent
from ..rpc.wire import describe_error
from . import contexts
from .functions import RecvBackward, Send, drain, send_gradients

_SEED = Tensor.wrap(np.zeros(()))  # the send functions' placeholder root gradient


# ---- recording, while messages are encoded and decoded -------------------------------------

def record_send(context_id, dest, tensors):
    """Note that the current context talked to `dest`; if `tensors` require grad, record a
    send function for them. Returns its id (None when there are none)."""
    context = contexts.retrieve(context_id)
    with context.cond:
        context.workers.add(dest)
    if not tensors:
        return None
    send_id = contexts.new_id(current_agent("RPC").rank)
    node = Send.apply(context, send_id, dest, *tensors)[0].grad_fn
    with context.cond:
        context.sends[send_id] = node, dest
    return send_id


def record_recv(context_id, sender, send_id, layouts):
    """The context of a message that arrived from `sender`, and the recv function its
    gradient-requiring tensors come out of (None when there are none)."""
    context = contexts.get_or_create(context_id)
    with context.cond:
        context.workers.add(sender)
        if send_id is None:
            return None
        node = RecvBackward(context, sender, send_id, layouts)
        context.recvs.append(node)
    return node


# ---- during a pass ---------------------------------------------------------------------------

def _file_gradients(sender, payload):
    context_id, round_, send_id, grads, error = payload
    context = contexts.find(context_id)
    if context is None:
        return  # the context ended after a failed pass; nobody waits for these any more
    with context.cond:
        if round_ < context.round:
            return  # late, for a pass that gave up on it here
        # A later round's may come before this worker joins that pass (the flood takes
        # another path): filed under its round, it waits for it.
        context.mailbox[round_, send_id] = (grads, error)
        context.arrived.add((round_, send_id))


def _run_pass(context, root_edges, root_grads, retain_graph):
    with context.cond:
        sends = [node for node, _ in context.sends.values()]
        recvs = list(context.recvs)
    edges = list(root_edges) + [(s, 0) for s in sends] + [(r, 0) for r in recvs]
    grads = list(root_grads) + [_SEED] * len(sends) + [r.placeholder for r in recvs]
    leaves = [n for n in reachable({node for node, _ in edges}) if type(n) is AccumulateGrad]
    captured = [(leaf, 0) for leaf in leaves] + [(r, 0) for r in recvs]
    try:
        results = run_backward(edges, grads, retain_graph, False, captured)
    except BaseException as exc:
        _answer_the_rest(context, recvs, _error_text(exc))  # its own failure comes second
        raise
    failed = _answer_the_rest(context, recvs, None)
    if failed is not None:
        raise failed
    for leaf, grad in zip(leaves, results):
        if grad is not None:
            context.accumulate(leaf.variable, grad)


def _answer_the_rest(context, recvs, error):
    """Answer every recv function the pass did not run; returns the first error sending
    raised (a peer gone), having still answered all the others."""
    first = None
    for node in recvs:
        if node.answered != context.round:
            try:
                send_gradients(node, None, error)
            except Exception as exc:
                first = first or exc
    return first


def _error_text(exc):
    agent = current_agent("distributed backward")
    kind, type_name, message, remote_traceback = describe_error(exc)
    return f"{type_name}: {message}\n(on {agent.describe(agent.rank)})\n{remote_traceback}"


def _pass_here(context, peers, root_edges, root_grads, retain_graph):
    """Run this worker's pass, having started the peers'; raise the first error of any."""
    agent = current_agent("distributed backward")
    round_ = context.round
    with contexts.running_in(None):
        started = [agent.request(peer, "dist_backward", (context.id, round_, retain_graph),
                                 "distributed backward", timeout=0, fenced=False)
                   for peer in sorted(peers)]
    errors = []
    try:
        _run_pass(context, root_edges, root_grads, retain_graph)
    except Exception as exc:
        errors.append(exc)
    try:
        drain(context, round_)
    except Exception as exc:
        errors.append(exc)
    for future in started:
        try:
            future.wait()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _join_pass(sender, payload):
    context_id, round_, retain_graph = payload
    context = contexts.get_or_create(context_id)
    agent = current_agent("distributed backward")
    with context.cond:
        if context.round >= round_:
            return  # another worker's flood got here first; that one waits for our pass
        context.round = round_
        peers = context.workers - {sender, agent.rank}
    _pass_here(context, peers, [], [], retain_graph)


def backward(context_id, roots, retain_graph=False):
    """Run the backward pass from `roots` (scalar tensors on this worker) through every
    worker the context reached; gradients accumulate in the context on each worker."""
    agent = current_agent("dist_autograd.backward")
    context = contexts.retrieve(context_id)
    roots = list(roots) if isinstance(roots, (list, tuple)) else [roots]
    if not roots:
        raise ValueError("dist_autograd.backward needs at least one root tensor")
    edges = []
    for i, root in enumerate(roots):
        if not isinstance(root, Tensor) or root.numel() != 1:
            raise ValueError(f"dist_autograd.backward: roots[{i}] must be a scalar Tensor (one "
                             f"element), got {root!r:.60}")
        edge = gradient_edge(root)
        if edge is None:
            raise RuntimeError(f"dist_autograd.backward: roots[{i}] does not require grad and "
                               f"has no grad_fn")
        edges.append(edge)
    grads = [Tensor.wrap(np.ones(r.shape, r.dtype)) for r in roots]
    with context.cond:
        context.round += 1
        peers = context.workers - {agent.rank}
    with record_function(f"dist_autograd.backward(context {context_id})"):
        _pass_here(context, peers, edges, grads, retain_graph)


# ---- ending a context ------------------------------------------------------------------------

def release(context_id, sender=None):
    """Drop the context here and start dropping it on every worker it reached (each forwards
    once, and answers once its forwards are answered); returns the Futures of those
    answers."""
    context = contexts.pop(context_id)
    if context is None:
        return []
    agent = current_agent("dist_autograd.context")
    peers = context.workers - {sender, agent.rank}
    with contexts.running_in(None):
        return [agent.request(peer, "dist_release", context_id, "distributed autograd "
                              "context clean-up", fenced=False)
                for peer in sorted(peers)]


def end(context_id):
    """The end of `with dist_autograd.context()`: as torch, the caller does not wait for the
    other workers to drop the context, but every request this worker sends afterwards waits
    for them first, so whatever it asks next sees the context gone everywhere (and the
    wait overlaps with the caller's own work in between, the next step's local forward).
    Nobody waits for the outcome: a failure is reported on stderr."""
    agent = current_agent("dist_autograd.context")
    futures = release(context_id)
    for future in futures:
        future.add_done_callback(lambda done: _report_failed_release(agent, context_id, done))
    agent.fence(futures)


def _report_failed_release(agent, context_id, future):
    error = future.exception()
    if error is not None:
        sys.stderr.write(f"[{agent.info.name}] distributed autograd: releasing context "
                         f"{context_id} failed: {error}\n")


def _release_request(sender, context_id):
    for future in release(context_id, sender):
        future.wait()


def handlers(Handler):
    return {
        "dist_backward": Handler(_join_pass),
        "dist_grad": Handler(_file_gradients, inline=True),
        "dist_release": Handler(_release_request),
    }
