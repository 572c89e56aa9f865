"""Ring allreduce written on point-to-point messages.

The algorithm Baidu brought to deep learning (DeepSpeech, then Horovod): split the buffer into
N chunks, one per rank, and pass chunks around a ring. In N-1 reduce-scatter steps each rank
sends one chunk to its right neighbour and folds the chunk arriving from its left into its
own copy; afterwards rank r holds the fully reduced chunk r+1. In N-1 all-gather steps the
finished chunks travel once more around the ring, overwriting the stale ones. Every rank sends
2(N-1)/N of the buffer in total, whatever N is, which is the bandwidth lower bound.

Select it with `all_reduce(tensor, algorithm="ring")`. `ring_all_reduce` itself works on a
bare numpy array and communicator, for code (such as DDP) that manages its own communicator.
"""
import numpy as np

from .buffers import mpi_type

_TAG = 0


def ring_all_reduce(arr, op, comm):
    """Reduce the C-contiguous array `arr` in place over `comm` with the MPI operation `op`.

    Chunk i's elements are combined in ring order starting at rank i, so floating-point
    results may differ from MPI's Allreduce in the last bits, but every rank ends up with the
    same bits (the all-gather copies them). Blocking; `comm` must carry no other
    point-to-point traffic with tag 0 while it runs.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        return
    flat = arr.reshape(-1)
    # Spread the remainder over the first chunks, so chunk sizes differ by at most one and a
    # buffer with fewer elements than ranks just has some empty chunks.
    sizes = np.full(size, flat.size // size)
    sizes[:flat.size % size] += 1
    ends = np.cumsum(sizes)
    chunks = [flat[end - n:end] for n, end in zip(sizes, ends)]
    datatype = mpi_type(arr.dtype)
    right, left = (rank + 1) % size, (rank - 1) % size
    incoming = np.empty(sizes[0], arr.dtype)

    for step in range(size - 1):
        outgoing, target = chunks[(rank - step) % size], chunks[(rank - step - 1) % size]
        received = incoming[:target.size]
        comm.Sendrecv([outgoing, datatype], right, _TAG, [received, datatype], left, _TAG)
        op.Reduce_local([received, datatype], [target, datatype])

    for step in range(size - 1):
        outgoing, target = chunks[(rank - step + 1) % size], chunks[(rank - step) % size]
        comm.Sendrecv([outgoing, datatype], right, _TAG, [target, datatype], left, _TAG)
