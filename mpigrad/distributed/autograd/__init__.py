"""mpigrad.distributed.autograd: torch.distributed.autograd over mpigrad's RPC.

    with dist_autograd.context() as context_id:
        loss = rpc.rpc_sync("worker1", forward, args=(x,)).sum()
        dist_autograd.backward(context_id, [loss])
        grads = dist_autograd.get_gradients(context_id)   # {tensor: gradient} on this worker

- `contexts`: the per-worker contexts and the thread's current one.
- `functions`: the send/recv pair recorded where tensors that require grad cross workers.
- `engine`: the distributed backward (FAST mode) over the local engine, and clean-up.
"""
from ..rpc.agent import current_agent
from . import contexts as _contexts
from . import engine as _engine
from .engine import backward

__all__ = ["context", "backward", "get_gradients"]


class context:
    """`with context() as context_id:` records a distributed forward pass; on exit the
    context is released on every worker it reached (before any later request of this
    worker is sent, without waiting here)."""

    def __enter__(self):
        agent = current_agent("dist_autograd.context")
        if _contexts.current_id() is not None:
            raise RuntimeError("a distributed autograd context is already current on this "
                               "thread; contexts do not nest")
        self._id = _contexts.new_id(agent.rank)
        _contexts.create(self._id)
        self._scope = _contexts.running_in(self._id)
        self._scope.__enter__()
        return self._id

    def __exit__(self, *exc_info):
        self._scope.__exit__(*exc_info)
        _engine.end(self._id)
        return False


def get_gradients(context_id):
    """The gradients the context accumulated on this worker: {tensor: gradient}."""
    ctx = _contexts.retrieve(context_id)
    with ctx.cond:
        return dict(ctx.grads)
