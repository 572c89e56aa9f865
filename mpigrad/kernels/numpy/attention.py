"""scaled_dot_product_attention for the numpy backend: the block-by-block loops of
kernels/compiled/attention.py, and the dropout factors the differentiable rules read.

The op's inputs are 4-d: q (B, H, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev) and an additive
mask (1 or B, 1 or H, 1 or L, 1 or S) or None. Its output is the attention output
(B, H, L, Ev), laid out in memory as the query is (as torch's); each row's log-sum-exp
(B, H, L, float64), which the fused backward reads, is what the forward keeps (ops/core.py's
`kept`).
"""
import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._compiled import compute_dtype, load_blas, loops, result

# Query rows and keys per tile: a (64, 64) tile of scores and its gradient stay in L1/L2
# beside the rows of q, k and v they come from, and a causal attention skips the tiles
# above the diagonal. Measured (float32, the kernels' forward + backward, one thread, on a
# loaded machine, so as a comparison only) against (64, 256), (128, 64) and (128, 128)
# tiles and against numpy's batched matmul over blocks of 64 query rows of every head: at
# (16, 8, 256, 64) causal 86 ms against 98-139 ms and numpy's 244 ms (torch's whole call
# with its graph: 116 ms); at (16, 4, 64, 32) and (16, 4, 64, 16), with one tile per head,
# all tile sizes 3.5 and 2.0-2.3 ms against numpy's 5.5 and 4.4 ms.
BLOCK_Q = 64
BLOCK_K = 64

_NO_MASK = {}


def _dropout(dropout_p, seed):
    """The loops' dropout arguments: whether to drop, the seed, the drop threshold on 53
    random bits, and the factor a kept element is multiplied by."""
    threshold = min(int(dropout_p * 2.0 ** 53), 2 ** 53)
    drop_scale = 0.0 if dropout_p >= 1 else 1.0 / (1.0 - dropout_p)
    return dropout_p > 0, np.uint64(seed), np.uint64(threshold), drop_scale


def _loop_input(x, dtype):
    """x as the loops take the mask and the output: C-contiguous and writeable (numba types a
    read-only array apart), in `dtype`. Each other layout would compile the loops again."""
    return np.require(x, dtype, ("C", "W"))


def _strided(x, dtype):
    """x (4-d) as the loops read q, k, v and the output's gradient: a 1-d array from x's first
    element over its span, and x's strides in elements. A view is read where it is (a GPT's q,
    k and v, sliced from one product and transposed); only an array of another dtype, a
    read-only one, one whose last dimension is not contiguous, or one whose rows overlap (a
    broadcast over the sequence: BLAS reads rows at least a row apart) is copied first."""
    item = np.dtype(dtype).itemsize
    row = max(x.shape[3], 1)  # BLAS reads a block of rows at least a row apart
    if (x.dtype != dtype or not x.flags.writeable
            or (x.shape[-1] > 1 and x.strides[-1] != item)
            or (x.shape[2] > 1 and x.strides[2] < row * item)  # rows overlap (broadcast)
            or any(stride < 0 or stride % item for stride in x.strides)):
        x = _loop_input(x, dtype)  # a writeable copy: ascontiguousarray keeps a read-only one
    strides = [stride // item for stride in x.strides[:3]]
    if x.shape[2] == 1 or x.shape[3] == 0:
        strides[2] = row  # never stepped over: any stride BLAS accepts
    span = 1 + sum((n - 1) * stride for n, stride in zip(x.shape, strides + [1]))
    return as_strided(x, (span if x.size else 0,), (item,)), tuple(strides) + (1,)


def _arrays(query, key, value, mask):
    """The loops' inputs: q, k and v as (flat, strides) pairs (_strided), their dims, the
    mask (_loop_input; a 1-element one standing for none), whether there is one, and the
    dtype the loops compute in."""
    dtype = compute_dtype(query.dtype)
    (batch, heads, length, width), (key_heads, source) = query.shape, key.shape[1:3]
    dims = (batch, heads, length, width, key_heads, source, value.shape[3])
    arrays = [part for x in (query, key, value) for part in _strided(x, dtype)]
    if mask is None:
        padding = _NO_MASK.get(dtype)
        if padding is None:
            padding = _NO_MASK[dtype] = np.zeros((1, 1, 1, 1), dtype)
        return arrays, dims, padding, False, dtype
    return arrays, dims, _loop_input(mask, dtype), True, dtype


def _empty_laid_out_as(x, shape, dtype):
    """An empty array of `shape` whose dimensions lie in memory in the order of x's strides,
    as torch lays out attention's output like its query, and the loops' (flat, strides) pair
    of it. A GPT's q is a transposed view, (B, L, H, E) in memory: its output then is too,
    and the next step, y.transpose(1, 2).contiguous(), copies nothing (the copy took 60-70
    us of each layer's forward). C-contiguous where x's last dimension is not its densest,
    as the loops write rows."""
    order = sorted(range(4), key=lambda d: -x.strides[d])
    if order[-1] != 3:
        order = [0, 1, 2, 3]
    base = np.empty([shape[d] for d in order], dtype)
    strides, step = [0] * 4, 1
    for d in reversed(order):  # in elements, rows at least one element apart for BLAS
        strides[d] = step
        step *= max(shape[d], 1)
    return base.transpose(np.argsort(order)), base.reshape(-1), tuple(strides)


def attention(query, key, value, mask, scale, causal, dropout_p, seed):
    arrays, dims, mask, has_mask, dtype = _arrays(query, key, value, mask)
    load_blas()
    out, *out_pair = _empty_laid_out_as(query, dims[:3] + (dims[6],), dtype)
    lse = np.empty(dims[:3])
    loops("attention").forward(*arrays, dims, float(scale), mask, has_mask, causal,
                               *_dropout(dropout_p, seed), BLOCK_Q, BLOCK_K, *out_pair, lse)
    return result(out, query.dtype), lse


def attention_backward(needs, g, ans, query, key, value, mask, scale, causal, dropout_p, seed,
                       kept):
    arrays, dims, mask_array, has_mask, dtype = _arrays(query, key, value, mask)
    load_blas()
    grads = [np.zeros(x.shape, dtype) for x in (query, key, value)]
    wants_mask = has_mask and needs[3]
    # Summed in float64: a broadcast mask's gradient adds up many tiles.
    mask_grad = np.zeros(mask_array.shape if wants_mask else (0, 0, 0, 0))
    loops("attention").backward(*arrays, dims, mask_array, has_mask, causal, float(scale),
                                *_dropout(dropout_p, seed), BLOCK_Q, BLOCK_K,
                                *_strided(ans, dtype), kept, *_strided(g, dtype),
                                mask_grad, *grads)
    grads = [result(gi, x.dtype) if need else None
             for gi, x, need in zip(grads, (query, key, value), needs)]
    return (*grads, result(mask_grad, mask.dtype) if wants_mask else None)


def attention_dropout(shape, dropout_p, seed, dtype):
    """The factor (0 or 1 / (1 - p)) the forward multiplied each probability of a
    (B, H, L, S) attention by."""
    out = np.empty(shape, compute_dtype(dtype))
    _, seed, threshold, drop_scale = _dropout(dropout_p, seed)
    loops("attention").dropout_scale(seed, threshold, drop_scale, out)
    return result(out, dtype)
