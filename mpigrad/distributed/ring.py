"""Ring allreduce written on point-to-point messages.

The algorithm Baidu brought to deep learning (DeepSpeech, then Horovod): split the buffer into
N chunks, one per rank, and pass chunks around a ring. In N-1 reduce-scatter steps each rank
sends one chunk to its right neighbour and folds the chunk arriving from its left into its
own copy; afterwards rank r holds the fully reduced chunk r+1. In N-1 all-gather steps the
finished chunks travel once more around the ring, overwriting the stale ones. Every rank sends
2(N-1)/N of the buffer in total, whatever N is, which is the bandwidth lower bound. Open
MPI's own Allreduce over TCP moved about half of that rate on a 1 Gbit/s link (see
docs/scaling.md), which is why DDP can choose this one between hosts.

`ring_rounds` is the ring as a generator of nonblocking hops (for algorithms/ddp_comm_hooks/rounds.py: DDP's buckets
progress while backward runs), optionally carrying each hop encoded by a codec (16-bit
compression, see ddp_comm_hooks/compression.py). `ring_all_reduce` runs it to the end,
blocking: select it with `all_reduce(tensor, algorithm="ring")`. Both work on bare numpy
arrays and a communicator.
"""
import numpy as np
from mpi4py import MPI

from .buffers import mpi_type


class Uncompressed:
    """The codec of a plain ring: hops carry the buffer's own numbers."""
    name = "ring"
    header = 0
    wire_mpi = MPI.BYTE  # point-to-point only moves bytes: any dtype goes, float16 too

    def __init__(self, dtype):
        self.wire = self.accumulate = np.dtype(dtype)

    @staticmethod
    def encode(x, out):
        np.copyto(out, x)

    @staticmethod
    def decode(message, out):
        np.copyto(out, message)


def ring_rounds(comm, buf, op=MPI.SUM, codec=None, tag=0):
    """Reduce the flat array `buf` over `comm` with `op`, in place, as a generator: it yields
    the requests of each hop (wait for them, then resume it) and returns `buf`.

    Hops carry `codec` messages (None: the buffer's numbers), and each rank combines in the
    codec's accumulation dtype. Chunk i's elements are combined in ring order starting at
    rank i, so results may differ from MPI's Allreduce in the last bits, but every rank ends
    up with the same bits (the all-gather passes the finished chunks on as they are, and
    their owner keeps what the others decode). `tag` keeps rings running at once on one
    communicator apart.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        return buf
    codec = Uncompressed(buf.dtype) if codec is None else codec
    total = buf if buf.dtype == codec.accumulate else buf.astype(codec.accumulate)
    # Spread the remainder over the first chunks, so chunk sizes differ by at most one and a
    # buffer with fewer elements than ranks just has some empty chunks.
    sizes = np.full(size, buf.size // size)
    sizes[:buf.size % size] += 1
    ends = np.cumsum(sizes)
    chunks = [total[end - n:end] for n, end in zip(sizes, ends)]
    right, left = (rank + 1) % size, (rank - 1) % size
    term = np.empty(sizes[0], codec.accumulate)

    def message(n):
        return np.empty(codec.header + n, codec.wire)

    def exchange(outgoing, incoming):
        return [comm.Isend([outgoing, codec.wire_mpi], right, tag),
                comm.Irecv([incoming, codec.wire_mpi], left, tag)]

    for step in range(size - 1):  # reduce-scatter: afterwards chunk rank+1 is complete here
        sending, receiving = chunks[(rank - step) % size], chunks[(rank - step - 1) % size]
        outgoing = message(sending.size)
        codec.encode(sending, outgoing)
        incoming = message(receiving.size)
        yield exchange(outgoing, incoming)
        received = term[:receiving.size]
        codec.decode(incoming, received)
        if op == MPI.SUM:
            receiving += received  # numpy sums float16 too, which not every MPI does
        else:
            datatype = mpi_type(codec.accumulate)
            op.Reduce_local([received, datatype], [receiving, datatype])

    own = chunks[(rank + 1) % size]
    outgoing = message(own.size)
    codec.encode(own, outgoing)
    codec.decode(outgoing, own)  # the owner keeps what the others will decode
    for step in range(size - 1):  # all-gather: pass the encoded sums on unchanged
        receiving = chunks[(rank - step) % size]
        incoming = message(receiving.size)
        yield exchange(outgoing, incoming)
        codec.decode(incoming, receiving)
        outgoing = incoming
    if total is not buf:
        np.copyto(buf, total, casting="unsafe")
    return buf


def ring_all_reduce(arr, op, comm):
    """Reduce the C-contiguous array `arr` in place over `comm` with the MPI operation `op`,
    blocking. `comm` must carry no other point-to-point traffic with tag 0 while it runs."""
    hops = ring_rounds(comm, arr.reshape(-1), op)
    for requests in hops:
        MPI.Request.Waitall(requests)
