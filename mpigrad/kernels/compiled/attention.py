"""scaled_dot_product_attention block by block (flash attention's scheme): no (B, H, L, S)
array is ever written whole, forward or backward.

The inputs are 4-d and contiguous: q (B, H, L, E) already multiplied by the scale (so no
pass over a tile scales its scores, forward or backward), k (B, Hk, S, E), v (B, Hk, S, Ev),
query head h reading key head h // (H / Hk) (grouped-query attention; Hk = H otherwise).
`mask` is additive, of shape (1 or B, 1 or H, 1 or L, 1 or S), read where it broadcasts.

Forward, per (batch, head) and block of query rows: the scores of one block of keys come
from one GEMM (numba's np.dot on contiguous tiles calls BLAS), each row keeps its running
maximum and sum of exponentials, and the output accumulates P V tile by tile, rescaled when
the maximum grows. Only the output (B, H, L, Ev) and each row's log-sum-exp (B, H, L, in
float64) are written.

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

from ._math import exp, exp_f32, jit, row_max, row_sum
from ._threads import parallel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@jit
def _exp_shifted(row, shift, single):
    """row[c] = e**(row[c] - shift), in float32 arithmetic when `single` (a float32 row)."""
    if single:
        shift32 = np.float32(shift)
        for c in range(row.shape[0]):
            row[c] = exp_f32(np.float32(row[c]) - shift32)
    else:
        for c in range(row.shape[0]):
            row[c] = exp(float(row[c]) - shift)


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
def _scores(q_tile, k_tile, mask, b, h, i0, j0, has_mask, causal, out):
    """out (nq, nk) = q_tile k_tile^T + mask, -inf above the diagonal when causal (key j is
    seen by query i when j <= i, torch's top-left alignment)."""
    np.dot(q_tile, k_tile.T, out)
    nq, nk = out.shape
    mb = b if mask.shape[0] > 1 else 0
    mh = h if mask.shape[1] > 1 else 0
    for r in range(nq):
        i = i0 + r
        if has_mask:
            mask_row = mask[mb, mh, i if mask.shape[2] > 1 else 0]
            if mask.shape[3] == 1:
                for c in range(nk):
                    out[r, c] = float(out[r, c]) + float(mask_row[0])
            else:
                for c in range(nk):
                    out[r, c] = float(out[r, c]) + float(mask_row[j0 + c])
        if causal:
            for c in range(max(i + 1 - j0, 0), nk):
                out[r, c] = -np.inf


@jit
def _drop(tile, b, h, i0, j0, heads, length, source, seed, threshold, drop_scale, out):
    for r in range(tile.shape[0]):
        row = ((b * heads + h) * length + i0 + r) * source + j0
        for c in range(tile.shape[1]):
            out[r, c] = (float(tile[r, c]) * drop_scale
                         if _kept(seed, row + c, threshold) else 0.0)


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
def _add(target, tile, factor):
    for r in range(tile.shape[0]):
        for c in range(tile.shape[1]):
            target[r, c] = float(target[r, c]) + float(tile[r, c]) * factor


@jit
def _sizes(q, k, v):
    """B, H, L, E, S, Ev; the query heads per key head; whether exponentials are taken in
    float32 arithmetic (float32 inputs)."""
    batch, heads, length, width = q.shape
    return (batch, heads, length, width, k.shape[2], v.shape[3], heads // k.shape[1],
            q.itemsize == 4)


@parallel()
def forward(q, k, v, mask, has_mask, causal, dropping, seed, threshold, drop_scale,
            block_q, block_k, out, lse):
    batch, heads, length = q.shape[:3]
    tiles = (length + block_q - 1) // block_q
    for unit in prange(batch * heads * tiles):
        _forward_block(q, k, v, mask, has_mask, causal, dropping, seed, threshold, drop_scale,
                       block_q, block_k, out, lse, unit // (heads * tiles),
                       unit // tiles % heads, unit % tiles * block_q)


@jit
def _forward_block(q, k, v, mask, has_mask, causal, dropping, seed, threshold, drop_scale,
                   block_q, block_k, out, lse, b, h, i0):
    """The output rows and log-sum-exps of query rows i0 to i0 + block_q of (b, h)."""
    batch, heads, length, _, source, value_width, group, single = _sizes(q, k, v)
    dtype = q.dtype
    kh = h // group
    i1 = min(i0 + block_q, length)
    nq = i1 - i0
    scores_space = np.empty(nq * block_k, dtype)
    dropped_space = np.empty(nq * block_k, dtype)
    product_space = np.empty(nq * value_width, dtype)
    acc = np.zeros((nq, value_width), dtype)
    top = np.full(nq, -np.inf)
    total = np.zeros(nq)
    q_tile = q[b, h, i0:i1]
    for j0 in range(0, source, block_k):
        if causal and j0 > i1 - 1:
            break  # every key from here on comes after every query of the block
        j1 = min(j0 + block_k, source)
        nk = j1 - j0
        s = scores_space[:nq * nk].reshape((nq, nk))
        _scores(q_tile, k[b, kh, j0:j1], mask, b, h, i0, j0, has_mask, causal, s)
        for r in range(nq):
            tile_top = row_max(s[r])
            new_top = tile_top if tile_top > top[r] or tile_top != tile_top else top[r]
            if new_top == -np.inf:  # every key so far masked: nothing to add
                for c in range(nk):
                    s[r, c] = 0.0
                continue
            rescale = exp(top[r] - new_top)
            # Exponentials and their sum in two loops: a float64 sum in the same loop kept
            # the exponentials from vectorising (7x slower).
            _exp_shifted(s[r], new_top, single)
            total[r] = total[r] * rescale + row_sum(s[r])
            top[r] = new_top
            for d in range(value_width):
                acc[r, d] = float(acc[r, d]) * rescale
        weights = _dropped(s, dropped_space, b, h, i0, j0, heads, length, source, dropping,
                           seed, threshold, drop_scale)
        product = product_space.reshape((nq, value_width))
        np.dot(weights, v[b, kh, j0:j1], product)
        _add(acc, product, 1.0)
    for r in range(nq):
        row = out[b, h, i0 + r]
        if total[r] == 0.0:  # a row with every key masked: zeros, as torch
            row[:] = 0.0
            lse[b, h, i0 + r] = -np.inf
            continue
        inverse = 1.0 / total[r]
        for d in range(value_width):
            row[d] = float(acc[r, d]) * inverse
        lse[b, h, i0 + r] = top[r] + math.log(total[r])


def backward(q, k, v, mask, has_mask, causal, scale, dropping, seed, threshold, drop_scale,
             block_q, block_k, out, lse, grad_out, mask_grad, grad_q, grad_k, grad_v):
    """grad_q, grad_k, grad_v (zeroed by the caller) and, when mask_grad is not empty (of
    the mask's shape, zeroed), the mask's gradient summed where it broadcasts."""
    arguments = (q, k, v, mask, has_mask, causal, scale, dropping, seed, threshold, drop_scale,
                 block_q, block_k, out, lse, grad_out, mask_grad, grad_q, grad_k, grad_v)
    shared = mask_grad.size > 0 and ((mask_grad.shape[0] == 1 and q.shape[0] > 1)
                                     or (mask_grad.shape[1] == 1 and k.shape[1] > 1))
    if shared:  # several units would add into one element
        _backward.serial(*arguments)
    else:
        _backward(*arguments)


@parallel()
def _backward(q, k, v, mask, has_mask, causal, scale, dropping, seed, threshold, drop_scale,
              block_q, block_k, out, lse, grad_out, mask_grad, grad_q, grad_k, grad_v):
    batch, key_heads = k.shape[:2]
    for unit in prange(batch * key_heads):
        _backward_pair(q, k, v, mask, has_mask, causal, scale, dropping, seed, threshold,
                       drop_scale, block_q, block_k, out, lse, grad_out, mask_grad, grad_q,
                       grad_k, grad_v, unit // key_heads, unit % key_heads)


@jit
def _backward_pair(q, k, v, mask, has_mask, causal, scale, dropping, seed, threshold,
                   drop_scale, block_q, block_k, out, lse, grad_out, mask_grad, grad_q, grad_k,
                   grad_v, b, kh):
    """The gradients of batch b's query heads that read key head kh, in head order."""
    batch, heads, length, width, source, value_width, group, single = _sizes(q, k, v)
    dtype = q.dtype
    wants_mask = mask_grad.size > 0
    delta = np.empty(length)
    p_space = np.empty(block_q * block_k, dtype)
    dropped_space = np.empty(block_q * block_k, dtype)
    ds_space = np.empty(block_q * block_k, dtype)
    width_space = np.empty(max(block_q, block_k) * max(width, value_width), dtype)
    for h in range(kh * group, (kh + 1) * group):
        for i in range(length):
            total = 0.0
            for d in range(value_width):
                total += float(grad_out[b, h, i, d]) * float(out[b, h, i, d])
            delta[i] = total
        for j0 in range(0, source, block_k):
            j1 = min(j0 + block_k, source)
            nk = j1 - j0
            k_tile, v_tile = k[b, kh, j0:j1], v[b, kh, j0:j1]
            for i0 in range(0, length, block_q):
                i1 = min(i0 + block_q, length)
                if causal and j0 > i1 - 1:
                    continue  # every query of the block comes before every key
                nq = i1 - i0
                q_tile, go_tile = q[b, h, i0:i1], grad_out[b, h, i0:i1]
                p = p_space[:nq * nk].reshape((nq, nk))
                _scores(q_tile, k_tile, mask, b, h, i0, j0, has_mask, causal, p)
                for r in range(nq):
                    row_lse = lse[b, h, i0 + r]
                    if row_lse == -np.inf:
                        for c in range(nk):
                            p[r, c] = 0.0
                        continue
                    _exp_shifted(p[r], row_lse, single)
                weights = _dropped(p, dropped_space, b, h, i0, j0, heads, length, source,
                                   dropping, seed, threshold, drop_scale)
                product = width_space[:nk * value_width].reshape((nk, value_width))
                np.dot(weights.T, go_tile, product)
                _add(grad_v[b, kh, j0:j1], product, 1.0)
                ds = ds_space[:nq * nk].reshape((nq, nk))
                np.dot(go_tile, v_tile.T, ds)
                if dropping:
                    _drop(ds, b, h, i0, j0, heads, length, source, seed, threshold,
                          drop_scale, ds)
                for r in range(nq):
                    row_delta = delta[i0 + r]
                    for c in range(nk):
                        ds[r, c] = float(p[r, c]) * (float(ds[r, c]) - row_delta)
                if wants_mask:
                    _add_broadcast(mask_grad, ds, b, h, i0, j0)
                product = width_space[:nq * width].reshape((nq, width))
                np.dot(ds, k_tile, product)
                _add(grad_q[b, h, i0:i1], product, scale)
                product = width_space[:nk * width].reshape((nk, width))
                np.dot(ds.T, q_tile, product)
                _add(grad_k[b, kh, j0:j1], product, 1.0)


@jit
def _add_broadcast(target, tile, b, h, i0, j0):
    """Adds the (nq, nk) tile at (b, h, i0, j0) into `target`, summing over the dimensions
    where target has size 1."""
    mb = b if target.shape[0] > 1 else 0
    mh = h if target.shape[1] > 1 else 0
    for r in range(tile.shape[0]):
        mi = i0 + r if target.shape[2] > 1 else 0
        for c in range(tile.shape[1]):
            mj = j0 + c if target.shape[3] > 1 else 0
            target[mb, mh, mi, mj] += tile[r, c]
