"""PowerSGD (Vogels et al., NeurIPS 2019): gradients reduced as low-rank products, as in
`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`.

    state = PowerSGDState(process_group=None, matrix_approximation_rank=4,
                          start_powerSGD_iter=10)
    ddp.register_comm_hook(state, powerSGD_hook)

Per bucket, once `state.iter` reaches `start_powerSGD_iter` (before that: a plain allreduce):

1. error feedback: the residual this rank kept from the bucket's last step is added to it;
2. each gradient is viewed as a matrix M (n x m: its first dimension by the rest). Those
   whose rank-r factors are not at least `min_compression_rate` times smaller than M
   ((n + m) r against n m: vectors, small matrices) are allreduced as they are, in one
   message; the rest are compressed:
3. P = M Q for every matrix, all P's allreduced in one message, then orthonormalized;
   Q = M^T P, all Q's allreduced in one message; M is replaced by P Q^T. Q starts random
   (the same on every rank, from `random_seed`), then, with `warm_start`, is last step's Q;
4. the residual kept for next time is what this rank put in minus its share of what came
   out, so nothing a rank contributed is lost, only delayed.

The bucket's buffer already holds this rank's gradients divided by the world size, so sums
over ranks are averages and the residual is kept in the same units (the input minus the
result over the world size). A rank sends (n + m) r numbers per compressed matrix instead of
n m. State is keyed by the bucket's index, as in PyTorch: the layout is rebuilt once, after
the first iteration, which is why PowerSGD (with error feedback or warm start) starts at
iteration 2 at the earliest.
"""
import numpy as np
from mpi4py import MPI

from ...buffers import mpi_float_type
from .rounds import rounds

__all__ = ["PowerSGDState", "powerSGD_hook"]


class PowerSGDState:
    """PowerSGD's settings and what it carries between iterations.

    matrix_approximation_rank  r, the rank of the P Q^T approximation
    start_powerSGD_iter        plain allreduce before this iteration (a warm-up; at least 2
                               with error feedback or warm start, see the module docstring)
    min_compression_rate       compress a matrix only if n m > rate * (n + m) r
    use_error_feedback         add back, next step, what compression lost this step
    warm_start                 start each step's Q from the last one (else random each step)
    orthogonalization_epsilon  added to each column's norm before dividing (0: none)
    random_seed                seeds the initial Q, the same on every rank

    `iter` counts finished iterations; `error_dict`, `p_memory_dict` and `q_memory_dict` hold
    each bucket's residual and low-rank factors.
    """

    def __init__(self, process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=1_000,
                 min_compression_rate=2, use_error_feedback=True, warm_start=True,
                 orthogonalization_epsilon=0, random_seed=0,
                 compression_stats_logging_frequency=10_000,
                 batch_tensors_with_same_shape=False):
        if not (isinstance(matrix_approximation_rank, int) and matrix_approximation_rank >= 1):
            raise ValueError(f"matrix_approximation_rank must be a positive int, got "
                             f"{matrix_approximation_rank!r}")
        if (use_error_feedback or warm_start) and start_powerSGD_iter <= 1:
            raise ValueError("start_powerSGD_iter must be > 1 when use_error_feedback or "
                             "warm_start is on: DDP rebuilds its buckets after the first "
                             "iteration, and this state is kept per bucket")
        self.process_group = process_group
        self.matrix_approximation_rank = matrix_approximation_rank
        self.start_powerSGD_iter = start_powerSGD_iter
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback = use_error_feedback
        self.warm_start = warm_start
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.rng = np.random.RandomState(random_seed)
        self.compression_stats_logging_frequency = max(1, compression_stats_logging_frequency)
        self.batch_tensors_with_same_shape = batch_tensors_with_same_shape
        self.iter = 0
        self.error_dict = {}
        self.p_memory_dict = {}
        self.q_memory_dict = {}
        self.total_numel_before_compression = 0
        self.total_numel_after_compression = 0

    def maybe_increase_iter(self, bucket):
        if bucket.is_last():
            self.iter += 1

    def compression_stats(self):
        """(compression rate, numbers before, numbers after) over all compressed steps."""
        after = self.total_numel_after_compression
        rate = self.total_numel_before_compression / after if after else 0.0
        return rate, self.total_numel_before_compression, after

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "process_group"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.process_group = None


def powerSGD_hook(state, bucket):
    """Reduce the bucket by PowerSGD (see the module docstring and PowerSGDState)."""
    buf = bucket.buffer()
    comm = bucket.comm
    datatype = mpi_float_type(buf.dtype)
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        request = comm.Iallreduce(MPI.IN_PLACE, [buf, datatype], MPI.SUM)
        return bucket.future("powerSGD_hook (allreduce before start_powerSGD_iter)",
                             [request], lambda: buf)
    return rounds(bucket, "powerSGD_hook", _power_step(state, bucket, buf, datatype))


def _power_step(state, bucket, buf, datatype):
    index = bucket.index()
    world_size = bucket.world_size
    p_comm, q_comm = bucket.round_comms(2)
    # With error feedback, the bucket's residual array (kept across steps, updated in place)
    # takes the residual added in: it then holds what this rank sends, and the products read
    # it there, so buf is free to receive the result and nothing is copied or allocated.
    sent = buf
    if state.use_error_feedback:
        residual = state.error_dict.get(index)
        if residual is not None and residual.shape == buf.shape:
            residual += buf
        else:
            residual = state.error_dict[index] = buf.copy()
        sent = residual

    matrices, plain = [], []
    offset = 0
    for grad in bucket.gradients():
        source = sent[offset:offset + grad.size].reshape(grad.shape)
        offset += grad.size
        matrix = source.reshape(grad.shape[0] if grad.ndim else 1, -1)
        n, m = matrix.shape
        rank = min(n, m, state.matrix_approximation_rank)
        state.total_numel_before_compression += n * m
        if (n + m) * rank * state.min_compression_rate < n * m:
            matrices.append((matrix, grad.reshape(n, m), rank))
            state.total_numel_after_compression += (n + m) * rank
        else:
            plain.append((source, grad))
            state.total_numel_after_compression += n * m
    if plain:
        uncompressed = np.concatenate([source.reshape(-1) for source, _ in plain])
        plain_request = [p_comm.Iallreduce(MPI.IN_PLACE, [uncompressed, datatype], MPI.SUM)]
    else:
        plain_request = []

    p_size = sum(matrix.shape[0] * rank for matrix, _, rank in matrices)
    q_size = sum(matrix.shape[1] * rank for matrix, _, rank in matrices)
    fresh = not state.warm_start or index not in state.q_memory_dict \
        or state.q_memory_dict[index].size != q_size
    if fresh:
        state.p_memory_dict[index] = np.empty(p_size, buf.dtype)
        state.q_memory_dict[index] = np.empty(q_size, buf.dtype)
    p_memory, q_memory = state.p_memory_dict[index], state.q_memory_dict[index]
    ps, qs = _factor_views(p_memory, q_memory, [(m, r) for m, _, r in matrices])
    if fresh:
        # The same seed on every rank, a new one each time: every rank starts from one Q.
        generator = np.random.default_rng(state.rng.randint(1_000_000_000))
        for q in qs:
            q[...] = generator.standard_normal(q.shape)
    for q in qs:
        _orthogonalize(q, state.orthogonalization_epsilon)
    for (matrix, _, _), p, q in zip(matrices, ps, qs):
        _by_row_blocks(lambda rows: np.matmul(matrix[rows], q, out=p[rows]), len(p))
    yield plain_request + [p_comm.Iallreduce(MPI.IN_PLACE, [p_memory, datatype], MPI.SUM)]

    at = 0
    for _, grad in plain:
        grad.reshape(-1)[...] = uncompressed[at:at + grad.size]
        at += grad.size
    for p in ps:
        _orthogonalize(p, state.orthogonalization_epsilon)
    for (matrix, _, _), p, q in zip(matrices, ps, qs):
        q.fill(0)
        _by_row_blocks(lambda rows: np.add(q, matrix[rows].T @ p[rows], out=q), len(p))
    yield [q_comm.Iallreduce(MPI.IN_PLACE, [q_memory, datatype], MPI.SUM)]

    # With error feedback, the residual becomes what this rank sent less its share of the
    # average everyone now applies: for each block of rows while the product is in cache.
    share = 1.0 / world_size
    for (source, result, _), p, q in zip(matrices, ps, qs):
        q_rows = np.ascontiguousarray(q.T)

        def product(rows, source=source, result=result, p=p):
            np.matmul(p[rows], q_rows, out=result[rows])
            if state.use_error_feedback:
                _subtract_scaled(source[rows], result[rows], share)
        _by_row_blocks(product, len(p))
    if state.use_error_feedback:
        for source, grad in plain:
            _subtract_scaled(source, grad, share)
    if not state.warm_start:
        state.p_memory_dict.pop(index, None)
        state.q_memory_dict.pop(index, None)
    state.maybe_increase_iter(bucket)
    return buf


_BLOCK = 1 << 16
# OpenBLAS multiplies a tall matrix by a rank-r factor 3-4x faster in slices of 128 rows than
# whole (measured, 1024 x 1024 by rank 4, one thread: P Q^T 0.19 against 0.72 ms): the small
# slices take its small-matrix kernels.
_ROWS = 128


def _by_row_blocks(product, rows):
    """product(slice) for consecutive slices of `_ROWS` rows."""
    for start in range(0, rows, _ROWS):
        product(slice(start, start + _ROWS))


def _subtract_scaled(target, x, scale):
    """target -= x * scale, for C-contiguous arrays, a cache-sized block at a time (no array
    of x's size)."""
    target, x = target.reshape(-1), x.reshape(-1)
    work = np.empty(min(_BLOCK, x.size), x.dtype)
    for start in range(0, x.size, _BLOCK):
        block = work[:min(_BLOCK, x.size - start)]
        np.multiply(x[start:start + _BLOCK], scale, out=block)
        target[start:start + _BLOCK] -= block


def _factor_views(p_memory, q_memory, matrices):
    ps, qs, p_at, q_at = [], [], 0, 0
    for matrix, rank in matrices:
        n, m = matrix.shape
        ps.append(p_memory[p_at:p_at + n * rank].reshape(n, rank))
        qs.append(q_memory[q_at:q_at + m * rank].reshape(m, rank))
        p_at += n * rank
        q_at += m * rank
    return ps, qs


def _orthogonalize(matrix, epsilon=0):
    """Make the columns of `matrix` (k x r) orthonormal in place, as PyTorch does: by QR
    (LAPACK's, like torch.linalg.qr) for r > 2 in float32 and float64, else by Gram-Schmidt
    in column order. A zero column stays zero under Gram-Schmidt (PyTorch would divide by zero
    unless given an epsilon)."""
    if matrix.shape[1] > 2 and matrix.dtype in (np.float32, np.float64):
        matrix[...] = np.linalg.qr(matrix)[0]
        return
    for i in range(matrix.shape[1]):
        column = matrix[:, i]
        norm = np.sqrt(np.dot(column, column))
        column /= norm + epsilon if epsilon else (norm if norm > 0 else 1)
        if i + 1 < matrix.shape[1]:
            rest = matrix[:, i + 1:]
            rest -= np.outer(column, column @ rest)
