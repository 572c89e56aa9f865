"""Top-k sparsification with error feedback: `topk_hook` with its state, `TopKState`.

Each rank sends the k largest-magnitude entries of (bucket + residual) as (index, value)
pairs (Iallgather), keeps what it did not send as its residual for the next step, and every
rank sums the gathered pairs densely.
"""
import math

import numpy as np
from mpi4py import MPI

from ...buffers import mpi_float_type

__all__ = ["TopKState", "topk_hook"]


class TopKState:
    """State of `topk_hook`: the fraction of each bucket sent (`ratio`) and, per bucket, the
    residual (what this rank has not sent yet), added back before the next selection."""

    def __init__(self, ratio=0.01):
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {ratio}")
        self.ratio = ratio
        self.residuals = {}

    def k_for(self, n):
        return max(1, min(n, math.ceil(self.ratio * n)))


def topk_hook(state, bucket):
    """Top-k sparsified sum with error feedback (see TopKState)."""
    buf = bucket.buffer()
    n = buf.size
    k = state.k_for(n)
    # Keyed by the bucket's parameters, not its index: the layout is rebuilt after the first
    # iteration, and a residual must go back to the gradients it was taken from.
    key = tuple(id(p) for p in bucket.parameters())
    residual = state.residuals.get(key)
    corrected = buf.copy() if residual is None or residual.shape != buf.shape else buf + residual
    if k == n:
        indices = np.arange(n, dtype=np.int64)
    else:
        indices = np.argpartition(np.abs(corrected), n - k)[n - k:].astype(np.int64)
    values = corrected[indices]
    corrected[indices] = 0
    state.residuals[key] = corrected
    comm = bucket.comm
    size = comm.Get_size()
    all_indices = np.empty((size, k), np.int64)
    all_values = np.empty((size, k), buf.dtype)
    datatype = mpi_float_type(buf.dtype)
    requests = [comm.Iallgather([indices, MPI.INT64_T], [all_indices, MPI.INT64_T]),
                comm.Iallgather([values, datatype], [all_values, datatype])]

    def densify():
        buf.fill(0)
        for r in range(size):  # in rank order on every rank, so every rank gets the same bits
            buf[all_indices[r]] += all_values[r]
        return buf
    return bucket.future("topk_hook", requests, densify,
                         keep_alive=(indices, values, all_indices, all_values))
