"""Communication hooks for DistributedDataParallel: how one bucket of gradients is reduced.

A hook is `hook(state, bucket) -> Future`, registered with `ddp.register_comm_hook(state,
hook)`. The reducer calls it once per bucket per backward, in bucket order on every rank, as
soon as the bucket is full. `bucket.buffer()` is the bucket's flat numpy array holding this
rank's gradients *already divided by the world size*, so a hook only has to sum over ranks.
The Future's `wait()` must return an array of the buffer's size and dtype holding that sum
(it may be the buffer itself); the reducer copies it into the parameters' gradients. For a
bucket holding one large parameter the buffer is that parameter's `.grad` array viewed flat
(see reducer.py), so a hook that reduces in place writes the gradient directly; either way a
hook must not keep the buffer once its Future has finished.

Hooks work on numpy arrays, and must run their MPI operations on `bucket.comm`, the reducer's
own communicator, with nonblocking calls: the reducer calls `future.done()` from later
gradient hooks, which is what lets MPI progress the reduction while backward continues.

Provided:
  allreduce_hook            the default: Iallreduce(SUM) of the buffer.
  fp16_compress_hook        the buffer travels as float16 (half the bytes) and comes back
                            as the buffer's dtype. With an MPI that can sum float16
                            (MPI_FLOAT16_T, e.g. MPICH >= 4.2) it is an Iallreduce on float16;
                            otherwise an Iallgather of the float16 buffers summed locally in
                            the buffer's dtype: each rank then receives (N-1) * 2 bytes per
                            element instead of the 2(N-1)/N * 4 of a float32 ring allreduce,
                            a saving only for N < 4.
  topk_hook + TopKState     top-k sparsification with error feedback: each rank sends the k
                            largest-magnitude entries of (bucket + residual) as (index, value)
                            pairs (Iallgather), keeps what it did not send as its residual for
                            the next step, and every rank sums the gathered pairs densely.
"""
import math

import numpy as np
from mpi4py import MPI

__all__ = ["Future", "GradBucket", "allreduce_hook", "fp16_compress_hook", "TopKState",
           "topk_hook", "mpi_float_type"]

_FLOAT_TYPES = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE}


def mpi_float_type(dtype):
    """The predefined MPI datatype that reductions accept for a floating numpy dtype."""
    dtype = np.dtype(dtype)
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype]
    if dtype == np.float16 and float16_sum_supported():
        return MPI.FLOAT16_T
    raise TypeError(f"DistributedDataParallel cannot reduce gradients of dtype {dtype} with "
                    f"this MPI; use float32 or float64 parameters")


_float16_support = []


def float16_sum_supported():
    """Whether this MPI library can MPI_SUM float16 (MPI_FLOAT16_T); probed once, locally."""
    if not _float16_support:
        ok = False
        datatype = getattr(MPI, "FLOAT16_T", MPI.DATATYPE_NULL)
        if datatype != MPI.DATATYPE_NULL:
            probe = np.ones(2, np.float16)
            try:
                MPI.COMM_SELF.Allreduce(MPI.IN_PLACE, [probe, datatype], MPI.SUM)
                ok = bool(probe[0] == 1)
            except MPI.Exception:
                ok = False
        _float16_support.append(ok)
    return _float16_support[0]


class Future:
    """A reduction in flight: MPI requests plus what to do once they finish.

    `done()` tests the requests (letting MPI progress them) and is True once they finished;
    `wait()` blocks until then and returns the value; `then(fn)` gives a Future whose value is
    `fn(this_future)`. `on_complete()` runs once, after the requests finish, and returns the
    value. `keep_alive` holds buffers MPI still reads or writes.
    """

    def __init__(self, requests=(), on_complete=None, keep_alive=()):
        self._requests = list(requests)
        self._on_complete = on_complete
        self._keep_alive = keep_alive
        self._finished = False
        self._value = None

    @classmethod
    def completed(cls, value):
        fut = cls()
        fut._finish()
        fut._value = value
        return fut

    def _finish(self):
        self._finished = True
        if self._on_complete is not None:
            self._value = self._on_complete()
        self._keep_alive = ()

    def done(self):
        if not self._finished and (not self._requests or MPI.Request.Testall(self._requests)):
            self._finish()
        return self._finished

    def wait(self):
        if not self._finished:
            if self._requests:
                MPI.Request.Waitall(self._requests)
            self._finish()
        return self._value

    def value(self):
        if not self._finished:
            raise RuntimeError("Future.value() called before the future completed; use wait()")
        return self._value

    def then(self, fn):
        return _Chained(self, fn)


class _Chained(Future):
    """The Future `then` returns: finishes with `fn(parent)` once `parent` has finished."""

    def __init__(self, parent, fn):
        super().__init__(on_complete=lambda: fn(parent))
        self._parent = parent

    def done(self):
        if not self._finished and self._parent.done():
            self._finish()
        return self._finished

    def wait(self):
        if not self._finished:
            self._parent.wait()
            self._finish()
        return self._value


class GradBucket:
    """What a comm hook is given: one bucket of gradients.

    `index()` its position in the launch order, `buffer()` the flat array (this rank's
    gradients divided by the world size), `parameters()` the Parameters it holds,
    `gradients()` views of the buffer shaped like them, `is_last()` whether it is the last
    bucket. `comm` is the communicator to run the reduction on, `world_size` its size.
    """

    def __init__(self, index, buffer, parameters, gradients, is_last, comm):
        self._index = index
        self._buffer = buffer
        self._parameters = parameters
        self._gradients = gradients
        self._is_last = is_last
        self.comm = comm
        self.world_size = comm.Get_size()

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return list(self._parameters)

    def gradients(self):
        return list(self._gradients)

    def is_last(self):
        return self._is_last


def allreduce_hook(state, bucket):
    """The default: sum the (pre-divided) buffer over ranks, in place. `state` is unused."""
    buf = bucket.buffer()
    request = bucket.comm.Iallreduce(MPI.IN_PLACE, [buf, mpi_float_type(buf.dtype)], MPI.SUM)
    return Future([request], lambda: buf)


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
        return Future([request], unpack, keep_alive=(half,))
    gathered = np.empty((comm.Get_size(), half.size), np.float16)
    # float16 bit patterns travel as 16-bit integers: moving them is exact.
    request = comm.Iallgather([half, MPI.INT16_T], [gathered, MPI.INT16_T])

    def reduce_locally():
        np.sum(gathered, axis=0, dtype=buf.dtype, out=buf)
        return buf
    return Future([request], reduce_locally, keep_alive=(half, gathered))


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
    return Future(requests, densify, keep_alive=(indices, values, all_indices, all_values))
