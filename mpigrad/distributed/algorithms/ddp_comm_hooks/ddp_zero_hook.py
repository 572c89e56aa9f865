"""ZeRO stage 2 with DistributedDataParallel: each gradient is reduced to the one rank that
owns its parameter in a ZeroRedundancyOptimizer, instead of to every rank.

    opt = ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=1e-3)
    ddp.register_comm_hook(opt, reduce_to_owner_hook)
    loss.backward(); opt.step()

A plain allreduce gives every rank every averaged gradient, but under ZeRO only a
parameter's owner steps it. Here a bucket goes in two rounds (rounds.py):

  1. reduce-scatter: rank r receives the sum of the bucket's r-th slice (slices as even as
     the bucket divides);
  2. gather to the owners: for each parameter, the ranks send their summed pieces of it to
     its owner (one Igatherv per parameter), which assembles the whole sum in its buffer.

Each rank sends (N-1)/N of the bucket in round 1 and at most that in round 2, and receives
only what it owns in round 2; the optimizer's broadcast of the updated parameters takes the
place of an allreduce's all-gather. (MPI_Reduce to the owner would say the same in one call,
but MPICH's is ten times slower than its allreduce for a 4 MB buffer; the two rounds are
within 1.5x of it on both libraries.) After `step()` the optimizer drops the gradients of
the parameters this rank does not own (`.grad` becomes None), so between steps a rank holds
only its shard's gradients. During backward the engine still builds every gradient: the
saving is in what lives across steps and in the bytes received.

A non-owner's `.grad` holds only its local contribution until `step()` drops it: read
gradients on their owner, or use the plain hook.
"""
import numpy as np
from mpi4py import MPI

from ...buffers import mpi_float_type
from .rounds import rounds

__all__ = ["reduce_to_owner_hook"]


def reduce_to_owner_hook(zero, bucket):
    """Reduce each parameter's gradient in the bucket to its owner in `zero` (a
    ZeroRedundancyOptimizer over the same process group as DDP)."""
    if bucket.world_size != zero.world_size:
        raise ValueError(f"reduce_to_owner_hook: DDP runs on {bucket.world_size} ranks but the "
                         f"ZeroRedundancyOptimizer on {zero.world_size}; give both the same "
                         f"process group")
    zero._drop_foreign_gradients = True
    owners = [zero.owner_of(p) for p in bucket.parameters()]
    sizes = [g.size for g in bucket.gradients()]
    return rounds(bucket, "reduce_to_owner_hook", _to_owners(bucket, owners, sizes))


def _to_owners(bucket, owners, sizes):
    buf = bucket.buffer()
    datatype = mpi_float_type(buf.dtype)
    scatter_comm, gather_comm = bucket.round_comms(2)
    size, rank = bucket.world_size, scatter_comm.Get_rank()
    slice_sizes = np.full(size, buf.size // size)
    slice_sizes[:buf.size % size] += 1
    slice_ends = np.cumsum(slice_sizes)
    slice_starts = slice_ends - slice_sizes
    summed = np.empty(slice_sizes[rank], buf.dtype)
    yield [scatter_comm.Ireduce_scatter([buf, datatype], [summed, datatype],
                                        slice_sizes.tolist(), MPI.SUM)]

    # Parameter p spans [start, end) of the bucket; rank r holds its overlap with slice r.
    requests = []
    start = 0
    for owner, n in zip(owners, sizes):
        end = start + n
        lows = np.clip(slice_starts, start, end)
        counts = np.clip(slice_ends, start, end) - lows
        mine = summed[lows[rank] - slice_starts[rank]:][:counts[rank]]
        if owner == rank:
            np.copyto(buf[lows[rank]:lows[rank] + counts[rank]], mine)
            received = [buf[start:end], (counts.tolist(), (lows - start).tolist()), datatype]
            requests.append(gather_comm.Igatherv(MPI.IN_PLACE, received, root=owner))
        else:
            requests.append(gather_comm.Igatherv([mine, datatype], None, root=owner))
        start = end
    yield requests
    return buf
