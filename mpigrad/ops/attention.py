"""scaled_dot_product_attention as one op over 4-d inputs (nn/functional/attention.py brings
any call there): q (B, H, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev), an additive mask
broadcasting to (B, H, L, S) or None; query head h reads key head h // (H / Hk).

The output is the attention output (B, H, L, Ev). The backend's forward works block by block
and keeps each row's log-sum-exp of the scores (B, H, L); the fused backward recomputes each
block's probabilities from it, so neither writes a (B, H, L, S) array
(kernels/compiled/attention.py). The rules here, with P the probabilities, P' = P * drop (the
dropout factors, from the stored seed):

    dV = P'^T g,  dP = (g V^T) * drop,  dS = P (dP - rowsum(dP P)),
    dQ = dS K scale,  dK = dS^T Q scale,  dmask = dS
    tangent: dS = (tQ K^T + Q tK^T) scale + tmask,
             t_out = (P (dS - rowsum(P dS)) * drop) V + P' tV

are written with ops and serve create_graph=True and tangents; they do build (B, H, L, S)
arrays, as any composition would.
"""
import numpy as np

from ..kernels import selected
from ..tensor import Tensor
from .core import Op
from .reduction import masked_softmax


def _grouped(x, heads):
    """(B, Hk, S, d) -> (B, heads, S, d), each key head serving heads / Hk query heads."""
    batch, key_heads, length, width = x.shape
    if key_heads == heads:
        return x
    return (x.unsqueeze(2).expand((batch, key_heads, heads // key_heads, length, width))
            .reshape((batch, heads, length, width)))


def _ungrouped(g, key_heads):
    """The adjoint of _grouped: a gradient per query head summed per key head."""
    batch, heads, length, width = g.shape
    if key_heads == heads:
        return g
    return g.reshape((batch, key_heads, heads // key_heads, length, width)).sum(2)


def _probabilities(query, key, mask, scale, causal):
    """softmax(q k^T scale + mask), zeros in a row whose keys are all masked."""
    scores = (query * scale) @ _grouped(key, query.shape[1]).transpose(-2, -1)
    if mask is not None:
        scores = scores + mask
    keep = np.tri(scores.shape[-2], scores.shape[-1], dtype=np.bool_) if causal else None
    return masked_softmax(scores, keep, dim=-1)


def _dropout_factor(probabilities, dropout_p, seed):
    if dropout_p == 0:
        return None
    return Tensor.wrap(selected.backend.forwards["attention_dropout"](
        probabilities.shape, dropout_p, seed, probabilities.dtype))


def _backward(needs, g, ans, query, key, value, mask, scale, causal, dropout_p, seed):
    heads = query.shape[1]
    p = _probabilities(query, key, mask, scale, causal)
    drop = _dropout_factor(p, dropout_p, seed)
    dropped = p if drop is None else p * drop
    grad_value = _ungrouped(dropped.transpose(-2, -1) @ g, value.shape[1]) if needs[2] else None
    dp = g @ _grouped(value, heads).transpose(-2, -1)
    if drop is not None:
        dp = dp * drop
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    grad_query = (ds @ _grouped(key, heads)) * scale if needs[0] else None
    grad_key = _ungrouped(ds.transpose(-2, -1) @ query, key.shape[1]) * scale \
        if needs[1] else None
    return grad_query, grad_key, grad_value, ds if needs[3] else None


def _tangent(tangents, ans, query, key, value, mask, scale, causal, dropout_p, seed):
    t_query, t_key, t_value, t_mask = tangents
    heads = query.shape[1]
    p = _probabilities(query, key, mask, scale, causal)
    drop = _dropout_factor(p, dropout_p, seed)
    parts = []
    if t_query is not None:
        parts.append((t_query @ _grouped(key, heads).transpose(-2, -1)) * scale)
    if t_key is not None:
        parts.append((query @ _grouped(t_key, heads).transpose(-2, -1)) * scale)
    if t_mask is not None:
        parts.append(t_mask)
    t_out = None
    if parts:
        t_scores = sum(parts[1:], parts[0])
        t_p = p * (t_scores - (p * t_scores).sum(-1, keepdim=True))
        t_out = (t_p if drop is None else t_p * drop) @ _grouped(value, heads)
    if t_value is not None:
        term = (p if drop is None else p * drop) @ _grouped(t_value, heads)
        t_out = term if t_out is None else t_out + term
    return t_out


# torch 2.13's CPU build: its flash kernel's node without dropout; with it, the math path,
# whose last node is the product's view back to 4-d.
scaled_dot_product_attention = Op(
    "scaled_dot_product_attention", None, _backward, _tangent, saves="* ans", joint=True,
    grad_fn_name=lambda params: "ScaledDotProductFlashAttentionForCpuBackward0"
    if params["dropout_p"] == 0 else "UnsafeViewBackward0")
