"""ZeRO stage 2 with DistributedDataParallel: each gradient is reduced to the one rank that
owns its parameter in a ZeroRedundancyOptimizer, instead of to every rank.

    opt = ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=1e-3)
    ddp.register_comm_hook(opt, reduce_to_owner_hook)
    loss.backward(); opt.step()

A plain allreduce gives every rank every averaged gradient, but under ZeRO only a
parameter's owner steps it; here each parameter's slice of the bucket goes to its owner by
MPI_Reduce (half the traffic of an allreduce: the reduce-scatter half without the
all-gather), and the optimizer's broadcast of the updated parameters is the other half. After
`step()` the optimizer drops the gradients of the parameters this rank does not own
(`.grad` becomes None), so between steps a rank holds only its shard's gradients. During
backward the engine still builds every gradient: the saving is in what lives across steps
and in the bytes sent.

A non-owner's `.grad` holds only its local contribution until `step()` drops it: read
gradients on their owner, or use the plain hook.
"""
from mpi4py import MPI

from ...buffers import mpi_float_type

__all__ = ["reduce_to_owner_hook"]


def reduce_to_owner_hook(zero, bucket):
    """Reduce each parameter's gradient in the bucket to its owner in `zero` (a
    ZeroRedundancyOptimizer over the same process group as DDP)."""
    if bucket.world_size != zero.world_size:
        raise ValueError(f"reduce_to_owner_hook: DDP runs on {bucket.world_size} ranks but the "
                         f"ZeroRedundancyOptimizer on {zero.world_size}; give both the same "
                         f"process group")
    zero._drop_foreign_gradients = True
    rank = bucket.comm.Get_rank()
    requests = []
    for param, grad in zip(bucket.parameters(), bucket.gradients()):
        datatype = mpi_float_type(grad.dtype)
        owner = zero.owner_of(param)
        flat = grad.reshape(-1)
        if owner == rank:
            requests.append(bucket.comm.Ireduce(MPI.IN_PLACE, [flat, datatype], MPI.SUM,
                                                root=owner))
        else:
            requests.append(bucket.comm.Ireduce([flat, datatype], None, MPI.SUM, root=owner))
    buf = bucket.buffer()
    return bucket.future("reduce_to_owner_hook", requests, lambda: buf)
