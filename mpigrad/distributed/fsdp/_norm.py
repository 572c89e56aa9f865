"""`ShardParameter`, a unit's piece of a parameter, and the gradient norm of such pieces.

`mpigrad.nn.utils.clip_grad_norm_` asks a parameter class for `_total_grad_norm`: for shards
it is the norm of the full gradients, each shard group summing its pieces' contributions
(the maximum for the inf-norm), the same on every rank. Pieces that are not shards count as
they are (replicated on every rank, they are counted once).
"""
import numpy as np

from ...nn.parameter import Parameter
from ...tensor import Tensor

__all__ = ["ShardParameter", "total_grad_norm"]


class ShardParameter(Parameter):
    """This rank's flat piece of a parameter; `shard_comm` is the ShardComm of the group its
    pieces are spread over."""
    __slots__ = ("shard_comm",)

    def __init__(self, data, requires_grad, shard_comm):
        super().__init__(data, requires_grad)
        self.shard_comm = shard_comm

    @staticmethod
    def _total_grad_norm(parameters, norm_type, error_if_nonfinite):
        return total_grad_norm(parameters, norm_type, error_if_nonfinite)


def total_grad_norm(parameters, norm_type=2.0, error_if_nonfinite=False):
    """The norm of the full gradients of which `parameters`' `.grad`s are pieces (a 0-dim
    Tensor, the same on every rank). Collective over the shard groups of the shards passed:
    every rank calls it alike, also a rank whose shards got no gradient."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    norm_type = float(norm_type)
    infinite = norm_type == np.inf
    comms = {}
    for p in params:
        if isinstance(p, ShardParameter):
            comms.setdefault(id(p.shard_comm), p.shard_comm)
    partial = {key: 0.0 for key in [None, *comms]}
    dtypes = []
    for p in params:
        if p.grad is None:
            continue
        dtypes.append(p.grad._array.dtype)
        key = id(p.shard_comm) if isinstance(p, ShardParameter) else None
        magnitude = np.abs(p.grad._array.reshape(-1).astype(np.float64, copy=False))
        partial[key] = max(partial[key], magnitude.max(initial=0.0)) if infinite else \
            partial[key] + float(np.sum(magnitude ** norm_type))
    # One reduction per group, groups in the same order on every rank.
    for key in sorted(comms, key=lambda k: comms[k].process_group.ranks):
        value = np.array([partial[key]])
        reduce = comms[key].allreduce_max if infinite else comms[key].allreduce_sum
        reduce(value, "the total norm of the sharded gradients")
        partial[key] = float(value[0])
    total = max(partial.values()) if infinite else sum(partial.values()) ** (1.0 / norm_type)
    dtype = np.result_type(*dtypes) if dtypes else np.float32
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the gradients "
            "by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return Tensor(np.array(total, dtype=dtype))
