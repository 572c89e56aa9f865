"""DistributedOptimizer: one local optimizer on each worker that owns parameters, stepped
with the gradients a distributed autograd context accumulated there."""
import threading

from .. import autograd as dist_autograd
from .. import rpc


class _LocalOptimizer:
    """Lives on a parameters' owner (created there by `rpc.remote`)."""

    def __init__(self, optimizer_class, param_rrefs, args, kwargs):
        self._params = [rref.local_value() for rref in param_rrefs]
        self._optimizer = optimizer_class(self._params, *args, **kwargs)
        # Several trainers may step the same parameters at once (a parameter server).
        self._lock = threading.Lock()

    def step(self, context_id):
        grads = dist_autograd.get_gradients(context_id)
        with self._lock:
            for param in self._params:
                param.grad = grads.get(param)
            self._optimizer.step()


def _step(optimizer_rref, context_id):
    optimizer_rref.local_value().step(context_id)


class DistributedOptimizer:
    """`DistributedOptimizer(optim.SGD, [RRefs to parameters], lr=0.1)`: a local
    `optimizer_class(params, *args, **kwargs)` on each owner of some of the parameters.
    `step(context_id)` steps all of them at once, each with the gradients of `context_id`
    on its worker, and raises the first error any of them met."""

    def __init__(self, optimizer_class, params_rref, *args, **kwargs):
        by_owner = {}
        for i, rref in enumerate(params_rref):
            if not isinstance(rref, rpc.RRef):
                raise TypeError(f"params_rref[{i}] must be an RRef to a parameter, got "
                                f"{type(rref).__name__}; wrap local parameters in rpc.RRef(p)")
            by_owner.setdefault(rref.owner(), []).append(rref)
        self.remote_optimizers = [
            rpc.remote(owner, _LocalOptimizer, args=(optimizer_class, rrefs, args, kwargs))
            for owner, rrefs in by_owner.items()]

    def step(self, context_id):
        local = [opt for opt in self.remote_optimizers if opt.is_owner()]
        futures = [rpc.rpc_async(opt.owner(), _step, args=(opt, context_id))
                   for opt in self.remote_optimizers if not opt.is_owner()]
        errors, local_errors = [], []
        for opt in local:  # this worker's share runs here while the others run there
            try:
                _step(opt, context_id)
            except Exception as exc:
                local_errors.append(exc)
        for future in futures:
            try:
                future.wait()
            except Exception as exc:  # these name the worker they came from
                errors.append(exc)
        if errors or local_errors:
            raise (errors + local_errors)[0]
