"""scaled_dot_product_attention block by block (flash attention's scheme): no (B, H, L, S)
array is ever written whole, forward or backward.

q (B, H, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev) and the output's gradient (B, H, L, Ev)
come as a 1-d array over the 4-d array's span and its four strides in elements, the last 1
(kernels/numpy/attention.py's `_strided`): a GPT's q, k and v, views of one packed product,
are read where they are, and every layout is one compiled signature. BLAS reads a block of
their rows in place, by its offset and row stride (_blas.gemm), and multiplies by the scale
itself (alpha), and the products add into the output and the gradients (beta 1): copying the
three views whole, forward and again backward, took about 1.5 ms of a GPT step, and copying
each block into a tile and each product out of one, 7-9% of the kernels' time. `dims` is
(B, H, L, E, Hk, S, Ev); query head h reads key head h // (H / Hk) (grouped-query attention;
Hk = H otherwise). `mask` is additive, of shape (1 or B, 1 or H, 1 or L, 1 or S), read where
it broadcasts; it, the log-sum-exps and the gradients are C-contiguous. The output comes
as the inputs do, laid out as torch lays it out, as q is (kernels/numpy/attention.py).

Forward, per (batch, head) and block of query rows: the scores of one block of keys come
from one GEMM, each row keeps its running maximum and sum of exponentials, and the output
accumulates P V tile by tile, rescaled when the maximum grows. A tile is held transposed,
keys x queries: a query's maximum and sum then run down a column, in vector lanes across
queries, where along a row each was a chain of dependent scalar steps (GPT's (16, 4, 64,
32) causal forward: 1.0 -> 0.7 ms, float32).
Only the output (B, H, L, Ev) and each row's log-sum-exp (B, H, L, in float64) are
written.

Backward recomputes each tile's probabilities from the log-sum-exp (p = exp(s - lse)), and
with D = rowsum(dO * O) (the same as rowsum(dP * P), dropout or not):
    dV += P_dropped^T dO,  dP = dO V^T (dropped as P was),  dS = P (dP - D),
    dQ += dS K scale,  dK += dS^T (Q scale),
five GEMMs per tile.

Dropout draws no array: an element's keep/drop is a hash (splitmix64) of a seed and the
element's index ((b H + h) L + i) S + j, so backward finds the same mask from the stored
seed. Accumulation order is fixed, so results are the same run to run.

Threads (see _threads.py) take whole blocks of query rows in the forward, and whole (batch,
key head) pairs in the backward: the query tiles of one pair add into the same rows of dK and
dV, so one thread does them all, in the serial order. A mask gradient that broadcasts over
the units threads would share is summed on one thread.
"""
import math

import numpy as np
from numba import prange

from ._blas import gemm
from ._math import exp, exp_f32, jit, lanes_jit
from ._threads import parallel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@jit
def _exp_shifted(tile, shift, single):
    """tile[c, r] = e**(tile[c, r] - shift[r]) (shift float64), in float32 arithmetic when
    `single` (a float32 tile)."""
    if single:
        shift32 = shift.astype(np.float32)
        for c in range(tile.shape[0]):
            column = tile[c]
            for r in range(tile.shape[1]):
                column[r] = exp_f32(np.float32(column[r]) - shift32[r])
    else:
        for c in range(tile.shape[0]):
            column = tile[c]
            for r in range(tile.shape[1]):
                column[r] = exp(float(column[r]) - shift[r])


@jit
def _kept(seed, index, threshold):
    """Whether element `index` survives dropout: the top 53 bits of splitmix64(seed, index)
    against threshold = p 2**53."""
    z = seed + (np.uint64(index) + np.uint64(1)) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)) >= threshold


@parallel()
def dropout_scale(seed, threshold, drop_scale, out):
    """The dropout factors (0 or 1 / (1 - p)) of every element of out (B, H, L, S), for the
    differentiable rules (which do write the whole array)."""
    batch, heads, length, source = out.shape
    for pair in prange(batch * heads):
        b, h = pair // heads, pair % heads
        for i in range(length):
            row = ((b * heads + h) * length + i) * source
            for j in range(source):
                out[b, h, i, j] = drop_scale if _kept(seed, row + j, threshold) else 0.0


@jit
def _scores(q, q_at, q_rows, k, k_at, k_rows, width, scale, mask, b, h, i0, j0, has_mask,
            causal, out):
    """out (nk, nq) = scale k_block q_block^T + mask^T: the tile of scores transposed, a key
    per row, so each query's maximum, exponentials and sum run down columns, vector lanes
    across queries (along a query's row they are dependent scalar steps). The blocks are
    read in place (element q_at on, rows q_rows apart; likewise k's). -inf where causal
    hides a key (key j is seen by query i when j <= i, torch's top-left alignment)."""
    nk, nq = out.shape
    gemm(nk, nq, width, scale, k, k_at, k_rows, False, q, q_at, q_rows, True, 0.0, out, 0, nq)
    mb = b if mask.shape[0] > 1 else 0
    mh = h if mask.shape[1] > 1 else 0
    for c in range(nk):
        j = j0 + c
        column = out[c]
        if has_mask:
            mask_column = mask[mb, mh, :, j if mask.shape[3] > 1 else 0]
            if mask.shape[2] == 1:
                for r in range(nq):
                    column[r] = float(column[r]) + float(mask_column[0])
            else:
                for r in range(nq):
                    column[r] = float(column[r]) + float(mask_column[i0 + r])
        if causal:
            for r in range(min(max(j - i0, 0), nq)):
                column[r] = -np.inf


@jit
def _drop(tile, b, h, i0, j0, heads, length, source, seed, threshold, drop_scale, out):
    """out = tile dropped, both (nk, nq) tiles transposed as _scores writes them."""
    for r in range(tile.shape[1]):
        row = ((b * heads + h) * length + i0 + r) * source + j0
        for c in range(tile.shape[0]):
            out[c, r] = (float(tile[c, r]) * drop_scale
                         if _kept(seed, row + c, threshold) else 0.0)


@jit
def _nan_or_inf(scores):
    """nan if a query's scores hold a nan, else -inf (all its keys masked so far)."""
    for c in range(scores.shape[0]):
        if scores[c] != scores[c]:
            return np.nan
    return -np.inf


@jit
def _dropped(tile, space, b, h, i0, j0, heads, length, source, dropping, seed, threshold,
             drop_scale):
    """The tile itself without dropout; with it, its dropped copy, written into `space`."""
    if not dropping:
        return tile
    out = space[:tile.size].reshape(tile.shape)
    _drop(tile, b, h, i0, j0, heads, length, source, seed, threshold, drop_scale, out)
    return out


@jit
def _sizes(q, dims):
    """B, H, L, E, S, Ev; the query heads per key head; whether exponentials are taken in
    float32 arithmetic (float32 inputs)."""
    batch, heads, length, width, key_heads, source, value_width = dims
    return (batch, heads, length, width, source, value_width, heads // key_heads,
            q.itemsize == 4)


@jit
def _row(flat, strides, b, h, i, width):
    """Row i of head h of batch b of a strided input: a contiguous 1-d view."""
    start = _at(strides, b, h, i)
    return flat[start:start + width]


@jit
def _at(strides, b, h, i):
    """The element row i of head h of batch b of a strided input starts at."""
    return b * strides[0] + h * strides[1] + i * strides[2]


@parallel()
def forward(q, q_strides, k, k_strides, v, v_strides, dims, scale, mask, has_mask, causal,
            dropping, seed, threshold, drop_scale, block_q, block_k, out, out_strides, lse):
    batch, heads, length = dims[:3]
    tiles = (length + block_q - 1) // block_q
    for unit in prange(batch * heads * tiles):
        _forward_block(q, q_strides, k, k_strides, v, v_strides, dims, scale, mask, has_mask,
                       causal, dropping, seed, threshold, drop_scale, block_q, block_k, out,
                       out_strides, lse, unit // (heads * tiles), unit // tiles % heads,
                       unit % tiles * block_q)


@jit
def _forward_block(q, q_strides, k, k_strides, v, v_strides, dims, scale, mask, has_mask,
                   causal, dropping, seed, threshold, drop_scale, block_q, block_k, out,
                   out_strides, lse, b, h, i0):
    """The output rows and log-sum-exps of query rows i0 to i0 + block_q of (b, h)."""
    batch, heads, length, width, source, value_width, group, single = _sizes(q, dims)
    dtype = q.dtype
    kh = h // group
    i1 = min(i0 + block_q, length)
    nq = i1 - i0
    scores_space = np.empty(nq * block_k, dtype)
    dropped_space = np.empty(nq * block_k, dtype)
    acc = np.empty((nq, value_width), dtype)  # the first tile's product writes it whole
    top = np.full(nq, -np.inf)
    new_top = np.empty(nq)
    rescale = np.empty(nq)
    total = np.zeros(nq)
    tile_total = np.empty(nq)
    q_at = _at(q_strides, b, h, i0)
    for j0 in range(0, source, block_k):
        if causal and j0 > i1 - 1:
            break  # every key from here on comes after every query of the block
        j1 = min(j0 + block_k, source)
        nk = j1 - j0
        s = scores_space[:nk * nq].reshape((nk, nq))
        _scores(q, q_at, q_strides[2], k, _at(k_strides, b, kh, j0), k_strides[2], width,
                scale, mask, b, h, i0, j0, has_mask, causal, s)
        # Copied element by element: numba's `new_top[:] = top` compiles the string formatting
        # of its shape-mismatch error, 1.7 s of CPU the first time a process compiles it.
        for r in range(nq):
            new_top[r] = top[r]
        for c in range(nk):
            column = s[c]
            for r in range(nq):
                # Both loaded first: read again inside the choice, the running maximum
                # kept the loop scalar (a 64 x 64 tile: 1.33 -> 0.79 us).
                x, m = float(column[r]), new_top[r]
                new_top[r] = x if x > m else m  # skips a nan
        for r in range(nq):
            if new_top[r] == -np.inf:  # no score above -inf so far: nan if one is nan
                new_top[r] = _nan_or_inf(s[:, r])
            # exp(-inf - (-inf)) would be nan; the accumulators hold zeros until then
            rescale[r] = 0.0 if top[r] == -np.inf else exp(top[r] - new_top[r])
            top[r] = new_top[r]
        # A query row every key is masked from so far adds nothing: its exponentials are
        # e**-inf (shift +inf), or nan where its scores are.
        for r in range(nq):
            new_top[r] = np.inf if top[r] == -np.inf else top[r]
        _exp_shifted(s, new_top, single)
        # Sums in their own loop: a float64 sum in the exponentials' loop kept them from
        # vectorising (7x slower).
        tile_total[:] = 0.0
        for c in range(nk):
            column = s[c]
            for r in range(nq):
                tile_total[r] += float(column[r])
        for r in range(nq):
            total[r] = total[r] * rescale[r] + tile_total[r]
        if j0 > 0:
            for r in range(nq):
                for d in range(value_width):
                    acc[r, d] = float(acc[r, d]) * rescale[r]
        weights = _dropped(s, dropped_space, b, h, i0, j0, heads, length, source, dropping,
                           seed, threshold, drop_scale)
        gemm(nq, value_width, nk, 1.0, weights, 0, nq, True, v, _at(v_strides, b, kh, j0),
             v_strides[2], False, 0.0 if j0 == 0 else 1.0, acc, 0, max(value_width, 1))
    for r in range(nq):
        row = _row(out, out_strides, b, h, i0 + r, value_width)
        if total[r] == 0.0:  # a row with every key masked: zeros, as torch
            row[:] = 0.0
            lse[b, h, i0 + r] = -np.inf
            continue
        inverse = 1.0 / total[r]
        for d in range(value_width):
            row[d] = float(acc[r, d]) * inverse
        lse[b, h, i0 + r] = top[r] + math.log(total[r])


def backward(q, q_strides, k, k_strides, v, v_strides, dims, mask, has_mask, causal, scale,
             dropping, seed, threshold, drop_scale, block_q, block_k, out, out_strides, lse,
             grad_out, go_strides, mask_grad, grad_q, grad_k, grad_v):
    """grad_q, grad_k, grad_v (zeroed by the caller) and, when mask_grad is not empty (of
    the mask's shape, zeroed), the mask's gradient summed where it broadcasts."""
    arguments = (q, q_strides, k, k_strides, v, v_strides, dims, mask, has_mask, causal, scale,
                 dropping, seed, threshold, drop_scale, block_q, block_k, out, out_strides, lse,
                 grad_out, go_strides, mask_grad, grad_q, grad_k, grad_v)
    shared = mask_grad.size > 0 and ((mask_grad.shape[0] == 1 and dims[0] > 1)
                                     or (mask_grad.shape[1] == 1 and dims[4] > 1))
    if shared:  # several units would add into one element
        _backward.serial(*arguments)
    else:
        _backward(*arguments)


@parallel()
def _backward(q, q_strides, k, k_strides, v, v_strides, dims, mask, has_mask, causal, scale,
              dropping, seed, threshold, drop_scale, block_q, block_k, out, out_strides, lse,
              grad_out, go_strides, mask_grad, grad_q, grad_k, grad_v):
    batch, key_heads = dims[0], dims[4]
    for unit in prange(batch * key_heads):
        _backward_pair(q, q_strides, k, k_strides, v, v_strides, dims, mask, has_mask, causal,
                       scale, dropping, seed, threshold, drop_scale, block_q, block_k, out,
                       out_strides, lse, grad_out, go_strides, mask_grad, grad_q, grad_k,
                       grad_v, unit // key_heads, unit % key_heads)


@jit
def _backward_pair(q, q_strides, k, k_strides, v, v_strides, dims, mask, has_mask, causal,
                   scale, dropping, seed, threshold, drop_scale, block_q, block_k, out,
                   out_strides, lse, grad_out, go_strides, mask_grad, grad_q, grad_k, grad_v,
                   b, kh):
    """The gradients of batch b's query heads that read key head kh, in head order."""
    batch, heads, length, width, source, value_width, group, single = _sizes(q, dims)
    dtype = q.dtype
    wants_mask = mask_grad.size > 0
    delta = np.empty(length)
    p_space = np.empty(block_q * block_k, dtype)
    dropped_space = np.empty(block_q * block_k, dtype)
    ds_space = np.empty(block_q * block_k, dtype)
    # The gradients' rows are C-contiguous: element offsets and row strides for gemm.
    q_pitch, v_pitch = max(width, 1), max(value_width, 1)
    pair_first_row = (b * grad_k.shape[1] + kh) * source  # of (b, kh) in grad_k and grad_v
    shift = np.empty(block_q)
    for h in range(kh * group, (kh + 1) * group):
        for i in range(length):
            delta[i] = _dot(_row(grad_out, go_strides, b, h, i, value_width),
                            _row(out, out_strides, b, h, i, value_width))
        for j0 in range(0, source, block_k):
            j1 = min(j0 + block_k, source)
            nk = j1 - j0
            k_at, v_at = _at(k_strides, b, kh, j0), _at(v_strides, b, kh, j0)
            for i0 in range(0, length, block_q):
                i1 = min(i0 + block_q, length)
                if causal and j0 > i1 - 1:
                    continue  # every query of the block comes before every key
                nq = i1 - i0
                q_at, go_at = _at(q_strides, b, h, i0), _at(go_strides, b, h, i0)
                tile_delta = delta[i0:i1]
                p = p_space[:nk * nq].reshape((nk, nq))  # transposed, as _scores writes
                _scores(q, q_at, q_strides[2], k, k_at, k_strides[2], width, scale, mask, b, h,
                        i0, j0, has_mask, causal, p)
                # A row every key was masked from (lse -inf) has zero probabilities:
                # e**(s - inf) with s at most -inf.
                for r in range(nq):
                    row_lse = lse[b, h, i0 + r]
                    shift[r] = np.inf if row_lse == -np.inf else row_lse
                _exp_shifted(p, shift[:nq], single)
                weights = _dropped(p, dropped_space, b, h, i0, j0, heads, length, source,
                                   dropping, seed, threshold, drop_scale)
                # dV[j0:j1] += P^T dO; dP^T = V dO^T
                gemm(nk, value_width, nq, 1.0, weights, 0, nq, False, grad_out, go_at,
                     go_strides[2], False, 1.0, grad_v, (pair_first_row + j0) * v_pitch,
                     v_pitch)
                ds = ds_space[:nk * nq].reshape((nk, nq))
                gemm(nk, nq, value_width, 1.0, v, v_at, v_strides[2], False, grad_out, go_at,
                     go_strides[2], True, 0.0, ds, 0, nq)
                if dropping:
                    _drop(ds, b, h, i0, j0, heads, length, source, seed, threshold,
                          drop_scale, ds)
                for c in range(nk):
                    ds_column, p_column = ds[c], p[c]
                    for r in range(nq):
                        ds_column[r] = float(p_column[r]) * (float(ds_column[r])
                                                             - tile_delta[r])
                if wants_mask:
                    _add_broadcast(mask_grad, ds, b, h, i0, j0)
                # dQ[i0:i1] += scale dS K; dK[j0:j1] += scale dS^T Q
                gemm(nq, width, nk, scale, ds, 0, nq, True, k, k_at, k_strides[2], False, 1.0,
                     grad_q, ((b * heads + h) * length + i0) * q_pitch, q_pitch)
                gemm(nk, width, nq, scale, ds, 0, nq, False, q, q_at, q_strides[2], False, 1.0,
                     grad_k, (pair_first_row + j0) * q_pitch, q_pitch)


@lanes_jit
def _dot(a, b):
    """sum a b in float64, in vector lanes: with one dependent addition per element, D =
    rowsum(dO * O) took 0.09 of the 1.5 ms of GPT's (16, 4, 64, 32) backward (float32)."""
    total = 0.0
    for d in range(a.shape[0]):
        total += float(a[d]) * float(b[d])
    return total


@jit
def _add_broadcast(target, tile, b, h, i0, j0):
    """Adds the (nk, nq) tile (transposed, as _scores writes it) at (b, h, i0, j0) into
    `target`, summing over the dimensions where target has size 1, in query-row order."""
    mb = b if target.shape[0] > 1 else 0
    mh = h if target.shape[1] > 1 else 0
    for r in range(tile.shape[1]):
        mi = i0 + r if target.shape[2] > 1 else 0
        for c in range(tile.shape[0]):
            mj = j0 + c if target.shape[3] > 1 else 0
            target[mb, mh, mi, mj] += tile[c, r]
