"""The plain hooks: allreduce_hook (DDP's default) and fp16_compress_hook.

fp16_compress_hook: the buffer travels as float16 (half the bytes) and comes back as the
buffer's dtype. With an MPI that can sum float16 (see buffers.py on float16) it is an
Iallreduce on float16; otherwise an Iallgather of the float16 buffers summed locally in the
buffer's dtype: each rank then receives (N-1) * 2 bytes per element instead of the
2(N-1)/N * 4 of a float32 ring allreduce, a saving only for N < 4.
"""
import numpy as np
from mpi4py import MPI

from ...buffers import float16_sum_supported
from ...comm_hook import allreduce_hook

__all__ = ["allreduce_hook", "fp16_compress_hook"]


def fp16_compress_hook(state, bucket):
    """Send the bucket as float16 and return the sum in the buffer's dtype. `state` is unused."""
    buf = bucket.buffer()
    half = buf.astype(np.float16)
    comm = bucket.comm
    if float16_sum_supported():
        request = comm.Iallreduce(MPI.IN_PLACE, [half, MPI.FLOAT16_T], MPI.SUM)

        def unpack():
            np.copyto(buf, half, casting="unsafe")
            return buf
        return bucket.future("fp16_compress_hook", [request], unpack, keep_alive=(half,))
    gathered = np.empty((comm.Get_size(), half.size), np.float16)
    # float16 bit patterns travel as 16-bit integers: moving them is exact.
    request = comm.Iallgather([half, MPI.INT16_T], [gathered, MPI.INT16_T])

    def reduce_locally():
        np.sum(gathered, axis=0, dtype=buf.dtype, out=buf)
        return buf
    return bucket.future("fp16_compress_hook", [request], reduce_locally,
                         keep_alive=(half, gathered))
