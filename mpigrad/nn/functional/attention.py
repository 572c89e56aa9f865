"""Attention: scaled_dot_product_attention, and multi_head_attention_forward over it."""
import math
import numbers

import numpy as np

from ... import dtypes, ops, random
from ...creation import as_tensor
from ...ops.autocast import fused
from ...ops.shape import pad
from ...tensor import Tensor
from .linalg import linear
from .regularization import dropout


# The scalar type names torch's C++ checks print, for messages that quote them.
_CPP_NAMES = {"float16": "c10::Half", "float32": "float", "float64": "double",
              "int8": "signed char", "uint8": "unsigned char", "int16": "short int",
              "int32": "int", "int64": "long int", "bool": "bool"}


def _cpp_name(dtype):
    return _CPP_NAMES.get(np.dtype(dtype).name, np.dtype(dtype).name)


def _check_attention_inputs(query, key, value, attn_mask, dropout_p):
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise RuntimeError(f"Expected query, key, and value to all be  at least 2 dimensional, "
                           f"but got query.dim: {query.ndim} key.dim: {key.ndim} and value.dim: "
                           f"{value.ndim} instead.")
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {_cpp_name(query.dtype)} key.dtype: "
                           f"{_cpp_name(key.dtype)} and value.dtype: {_cpp_name(value.dtype)} "
                           f"instead.")
    if attn_mask is not None and attn_mask.dtype != np.bool_ \
            and not dtypes.is_floating_point(attn_mask.dtype) and attn_mask.dtype != query.dtype:
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query "
                           f"dtype, but got attn_mask.dtype: {_cpp_name(attn_mask.dtype)} and  "
                           f"query.dtype: {_cpp_name(query.dtype)} instead.")
    if not isinstance(dropout_p, numbers.Real) or not 0 <= dropout_p <= 1:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(f"scaled_dot_product_attention: query and key must have the same "
                           f"embedding size, got {query.shape[-1]} and {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: key and value must have the same "
                           f"sequence length, got {key.shape[-2]} and {value.shape[-2]}")


def _check_mask_fits(mask, scores_shape):
    """The mask must broadcast to the scores' shape without enlarging it (torch adds it into
    the scores in place)."""
    shape = tuple(mask.shape)
    for axis in range(1, min(len(shape), len(scores_shape)) + 1):
        a, b = scores_shape[-axis], shape[-axis]
        if a != b and b != 1 and a != 1:
            raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b "
                               f"({b}) at non-singleton dimension {len(scores_shape) - axis}")
    broadcast = np.broadcast_shapes(shape, scores_shape)
    if broadcast != tuple(scores_shape):
        raise RuntimeError(f"output with shape {list(scores_shape)} doesn't match the broadcast "
                           f"shape {list(broadcast)}")


def _repeat_heads(x, repeats):
    """(..., Hk, S, d) -> (..., Hk * repeats, S, d), each head repeated in place (torch's
    repeat_interleave along the head dimension)."""
    *batch, heads, length, width = x.shape
    return (x.unsqueeze(-3).expand((*batch, heads, repeats, length, width))
            .reshape((*batch, heads * repeats, length, width)))


def _broadcast_batch(*shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise RuntimeError(f"scaled_dot_product_attention: the batch dimensions of query, key "
                           f"and value do not broadcast: {', '.join(map(str, shapes))}") from None


def _as_4d(x, outer, heads):
    """x (..., n, d) with its batch dimensions broadcast to outer + (heads,), as
    (prod(outer), heads, n, d): a view unless dimensions must be merged."""
    shape = tuple(outer) + (heads,) + tuple(x.shape[-2:])
    if tuple(x.shape) != shape:
        x = x.expand(shape)
    if len(shape) == 4:
        return x
    return x.reshape((math.prod(outer), heads) + tuple(x.shape[-2:]))


def _mask_4d(mask, dtype, outer, scores_ndim):
    """The mask made additive in `dtype` (a bool mask keeps where True), as (1 or B, 1 or H,
    1 or L, 1 or S): its broadcast dimensions stay of size 1, so nothing the size of the
    scores is made from a smaller mask."""
    if mask.dtype == np.bool_:
        mask = Tensor.wrap(np.where(mask._array, 0.0, -np.inf).astype(dtype))
    elif mask.dtype != dtype:
        mask = mask.to(dtype)
    mask = mask.reshape((1,) * (scores_ndim - mask.ndim) + tuple(mask.shape))
    batch = tuple(mask.shape[:-3])
    if any(size != 1 for size in batch) and batch != tuple(outer):
        mask = mask.expand(tuple(outer) + tuple(mask.shape[-3:]))
    size = 1 if all(size == 1 for size in mask.shape[:-3]) else math.prod(outer)
    return mask.reshape((size,) + tuple(mask.shape[-3:]))


@fused(lower_precision=True)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(query key^T * scale + mask) value over the last two dimensions, batch
    dimensions broadcast. A bool mask keeps where True, a float mask is added; is_causal
    masks keys after each query (top-left aligned). Rows whose keys are all masked give zeros,
    as in torch. With enable_gqa, key and value heads (dimension -3) serve query heads in
    groups (torch's repeat_interleave), without being copied.

    One op over 4-d views of the inputs (ops/attention.py): the forward and the fused
    backward go block by block and keep no (..., L, S) array; the graph saves q, k, v and the
    output, and the forward keeps its rows' log-sum-exp. Dropout's mask is a hash of a seed
    drawn here from mpigrad's generator, so backward finds it again without storing it.
    """
    attn_mask = None if attn_mask is None else as_tensor(attn_mask)
    _check_attention_inputs(query, key, value, attn_mask, dropout_p)
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 \
            and not query.shape[-3] == key.shape[-3] == value.shape[-3]:
        heads, key_heads, value_heads = query.shape[-3], key.shape[-3], value.shape[-3]
        if heads % key_heads or heads % value_heads:
            raise RuntimeError("Number of heads in key and value must divide the number of "
                               "heads in ")
        if key_heads != value_heads:  # the op serves one grouping: both to query's heads
            key = _repeat_heads(key, heads // key_heads)
            value = _repeat_heads(value, heads // value_heads)
        outer = _broadcast_batch(query.shape[:-3], key.shape[:-3], value.shape[:-3])
        batch, key_heads = outer + (heads,), key.shape[-3]
    else:
        batch = _broadcast_batch(query.shape[:-2], key.shape[:-2], value.shape[:-2])
        outer, heads = batch[:-1], (batch[-1] if batch else 1)
        key_heads = heads
    # A Python float, so float32 inputs stay float32. Heads of width 0 score 0 whatever the
    # scale (torch's 1 / sqrt(0) multiplies nothing).
    if scale is None:
        scale = 1.0 / float(np.sqrt(query.shape[-1])) if query.shape[-1] else 1.0
    scale = float(scale)
    length, value_width = query.shape[-2], value.shape[-1]
    scores_shape = batch + (length, key.shape[-2])
    mask = None
    if attn_mask is not None:
        _check_mask_fits(attn_mask, scores_shape)
        mask = _mask_4d(attn_mask, query.dtype, outer, len(outer) + 3)
    seed = int(random.integers_array(0, 2 ** 63 - 1, (), np.int64)) if dropout_p > 0 else 0
    out = ops.scaled_dot_product_attention(
        _as_4d(query, outer, heads), _as_4d(key, outer, key_heads),
        _as_4d(value, outer, key_heads), mask, scale=scale, causal=bool(is_causal),
        dropout_p=float(dropout_p), seed=seed)
    if query.ndim == 4 and len(batch) == 2:
        return out
    # torch 2.13's CPU build runs other ranks through its math path, whose last node is the
    # view back to the input's rank (the product itself for 2-d inputs).
    out = out.reshape(batch + (length, value_width))
    return ops.named(out, "MmBackward0" if query.ndim == 2 else "UnsafeViewBackward0",
                     query, key, value)


def _check_mha_shapes(query, key, value, key_padding_mask, attn_mask, num_heads):
    """torch's _mha_shape_check: whether the input is batched, with its assertions."""
    rank = query.ndim
    if rank not in (2, 3):
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received "
                             f"{rank}-D query tensor")
    kind = "batched (3-D)" if rank == 3 else "unbatched (2-D)"
    if key.ndim != rank or value.ndim != rank:
        raise AssertionError(f"For {kind} `query`, expected `key` and `value` to be {rank}-D but "
                             f"found {key.ndim}-D and {value.ndim}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.ndim != rank - 1:
        raise AssertionError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or "
                             f"{rank - 1}-D but found {key_padding_mask.ndim}-D tensor instead")
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise AssertionError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D "
                             f"but found {attn_mask.ndim}-D tensor instead")
    if query.ndim == 2 and attn_mask is not None and attn_mask.ndim == 3:
        expected = (num_heads, query.shape[0], key.shape[0])
        if tuple(attn_mask.shape) != expected:
            raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                 f"{tuple(attn_mask.shape)}")
    return query.ndim == 3


def _additive_mask(mask, name, dtype):
    """torch's _canonical_mask: a bool mask (True = do not attend) as 0 / -inf of `dtype`;
    a float mask unchanged."""
    if mask is None:
        return None
    mask = as_tensor(mask)
    if mask.dtype == np.bool_:
        return Tensor.wrap(np.where(mask._array, -np.inf, 0.0).astype(dtype))
    if not dtypes.is_floating_point(mask.dtype):
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


def _in_projection(query, key, value, weight, bias, separate):
    """q, k, v projected by the packed (3E, E) weight, or by three separate weights."""
    weights = separate if weight is None else weight.chunk(3)
    biases = (None,) * 3 if bias is None else bias.chunk(3)
    return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """Multi-head attention on sequence-first input (L, N, E), or unbatched (L, E); returns
    (output, weights), weights None unless need_weights (averaged over heads if
    average_attn_weights). Masks as torch's: bool True means "do not attend".

    In torch's steps, each a function below: the masks made additive, the input projections,
    the split into heads (with bias_k, bias_v and add_zero_attn's extra key, and the masks
    merged), the attention itself, and the output projection."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k and static_v are not "
                                  "supported")
    key_padding_mask = None if key_padding_mask is None else as_tensor(key_padding_mask)
    attn_mask = None if attn_mask is None else as_tensor(attn_mask)
    batched = _check_mha_shapes(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    key_padding_mask, attn_mask, is_causal = _mha_masks(query, key_padding_mask, attn_mask,
                                                        is_causal, need_weights)
    q, k, v = _mha_projections(query, key, value, embed_dim_to_check, num_heads,
                               in_proj_weight, in_proj_bias, use_separate_proj_weight,
                               (q_proj_weight, k_proj_weight, v_proj_weight))
    q, k, v, attn_mask = _mha_heads(q, k, v, attn_mask, key_padding_mask, bias_k, bias_v,
                                    add_zero_attn, num_heads, query.shape, key.shape[0])
    out, weights = _mha_attention(q, k, v, attn_mask, dropout_p if training else 0.0,
                                  need_weights, is_causal, query.shape[1], num_heads)
    return _mha_output(out, weights, query.shape, num_heads, out_proj_weight, out_proj_bias,
                       average_attn_weights, batched)


def _mha_masks(query, key_padding_mask, attn_mask, is_causal, need_weights):
    """Both masks as torch's additive masks of query's dtype, and whether attention may apply
    causality itself (is_causal, then without attn_mask)."""
    key_padding_mask = _additive_mask(key_padding_mask, "key_padding_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        # The mask is only a hint here: attention applies causality itself.
        attn_mask = None
    else:
        attn_mask = _additive_mask(attn_mask, "attn_mask", query.dtype)
        if key_padding_mask is not None:
            is_causal = False
    return key_padding_mask, attn_mask, is_causal


def _mha_projections(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
                     in_proj_bias, use_separate_proj_weight, separate_weights):
    """q, k, v (L or S, N, E) from the packed in-projection or the three separate ones."""
    embed_dim = query.shape[2]
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    if (embed_dim // num_heads) * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(f"key's sequence and batch dims {tuple(key.shape[:2])} do not "
                                 f"match value's {tuple(value.shape[:2])}")
        return _in_projection(query, key, value, None, in_proj_bias, separate_weights)
    if key.shape != value.shape:
        raise AssertionError(f"key shape {tuple(key.shape)} does not match value shape "
                             f"{tuple(value.shape)}")
    return _in_projection(query, key, value, in_proj_weight, in_proj_bias, None)


def _mha_heads(q, k, v, attn_mask, key_padding_mask, bias_k, bias_v, add_zero_attn, num_heads,
               query_shape, src_len):
    """q, k, v split into heads, (L, N, E) -> (N * heads, L, head_dim), torch's layout for the
    batched products, with bias_k, bias_v and add_zero_attn's extra key; and attn_mask checked
    against (L, S) and merged with the key padding mask, as (1 or N * heads, L, S)."""
    tgt_len, bsz, embed_dim = query_shape
    head_dim = embed_dim // num_heads
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, "
                                   f"but should be {(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but "
                               f"should be {(bsz * num_heads, tgt_len, src_len)}.")
    if bias_k is not None and bias_v is not None:
        k = ops.cat([k, bias_k.expand((1, bsz, embed_dim))])
        v = ops.cat([v, bias_v.expand((1, bsz, embed_dim))])
        attn_mask = None if attn_mask is None else pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else pad(key_padding_mask, (0, 1))
    elif bias_k is not None or bias_v is not None:
        raise AssertionError("bias_k and bias_v must both be given or both be None")
    q = q.reshape((tgt_len, bsz * num_heads, head_dim)).transpose(0, 1)
    k = k.reshape((k.shape[0], bsz * num_heads, head_dim)).transpose(0, 1)
    v = v.reshape((v.shape[0], bsz * num_heads, head_dim)).transpose(0, 1)
    if add_zero_attn:
        zeros = Tensor.wrap(np.zeros((bsz * num_heads, 1, head_dim), q.dtype))
        k, v = ops.cat([k, zeros], dim=1), ops.cat([v, zeros], dim=1)
        attn_mask = None if attn_mask is None else pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else pad(key_padding_mask, (0, 1))
    src_len = k.shape[1]
    if key_padding_mask is not None:
        for axis, expected in enumerate((bsz, src_len)):
            if key_padding_mask.shape[axis] != expected:
                raise AssertionError(f"Expected key_padded_mask.shape[{axis}] to be {expected}, "
                                     f"but got {key_padding_mask.shape[axis]}")
        padding = (key_padding_mask.reshape((bsz, 1, 1, src_len))
                   .expand((bsz, num_heads, 1, src_len)).reshape((bsz * num_heads, 1, src_len)))
        attn_mask = padding if attn_mask is None else attn_mask + padding
    return q, k, v, attn_mask


def _mha_attention(q, k, v, attn_mask, dropout_p, need_weights, is_causal, bsz, num_heads):
    """Every head's attention, (N * heads, L, head_dim) or (N, heads, L, head_dim), and its
    weights (N * heads, L, S) if need_weights (else None)."""
    if need_weights:
        scores = (q * (1.0 / float(np.sqrt(q.shape[-1])))) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores + attn_mask
        # A plain softmax, as torch's weights path: fully masked rows come out NaN there too.
        weights = ops.softmax(scores, -1)
        if dropout_p > 0:
            weights = dropout(weights, p=dropout_p)
        return weights @ v, weights
    src_len = k.shape[1]
    if attn_mask is not None:
        attn_mask = (attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1
                     else attn_mask.reshape((bsz, num_heads, -1, src_len)))
    q, k, v = (x.reshape((bsz, num_heads, x.shape[1], x.shape[2])) for x in (q, k, v))
    return scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal), None


def _mha_output(out, weights, query_shape, num_heads, out_proj_weight, out_proj_bias,
                average_attn_weights, batched):
    """The heads joined back, (L, N, E), through the output projection; the weights per
    sample (N, heads, L, S), averaged over the heads if asked; the batch dimension dropped
    again for unbatched input."""
    tgt_len, bsz, embed_dim = query_shape
    head_dim = embed_dim // num_heads
    out = out.reshape((bsz, num_heads, tgt_len, head_dim)).permute((2, 0, 1, 3)) \
        .reshape((tgt_len, bsz, embed_dim))
    out = linear(out, out_proj_weight, out_proj_bias)
    if weights is not None:
        weights = weights.reshape((bsz, num_heads, tgt_len, weights.shape[-1]))
        if average_attn_weights:
            weights = weights.mean(1)
    if not batched:
        out = out.squeeze(1)
        weights = None if weights is None else weights.squeeze(0)
    return out, weights
