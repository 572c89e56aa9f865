"""Lookups: embedding, embedding_bag and one_hot."""
import numpy as np

from ... import ops
from ...autograd import grad_mode
from ...creation import as_tensor
from ...tensor import Tensor
from .. import _checks


def _check_indices(indices, size, what, name, out_of_range):
    """Integer indices in [0, size); torch raises `out_of_range` (IndexError for embedding,
    RuntimeError for one_hot) for one outside."""
    if indices.dtype.kind not in "iu":
        raise RuntimeError(f"{what}: expected indices of an integer dtype, got {indices.dtype}")
    bad = (indices < 0) | (indices >= size)
    if bad.any():
        raise out_of_range(f"{what}: index {indices[bad].flat[0]} is out of range for "
                           f"{name}={size} (expected 0 <= index < {size})")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` picked by the integer tensor `input`; repeated indices add their
    gradients. The padding_idx row gets no gradient. With max_norm, the picked rows are first
    rescaled in place to norm at most max_norm (as torch does). With scale_grad_by_freq, each
    row's gradient is divided by its index's count in input. With sparse, weight's gradient
    is a sparse COO tensor of the looked-up rows (mpigrad.sparse), as torch's."""
    padding_idx = _checks.embedding_padding_idx("embedding", weight.shape[0], padding_idx)
    input = as_tensor(input)
    _check_indices(input._array, weight.shape[0], "embedding", "num_embeddings", IndexError)
    if sparse and scale_grad_by_freq and weight.requires_grad:
        raise RuntimeError("embedding_backward: scale_grad_by_freq not supported with sparse "
                           "gradients")
    if max_norm is not None:
        _renorm_rows(weight, np.unique(input._array), max_norm, norm_type)
    scale = None
    if scale_grad_by_freq:
        # Each looked-up row's gradient divided by how often its index occurs in input; the
        # value (and the tangent) are untouched, as in torch.
        _, where_from, counts = np.unique(input._array, return_inverse=True, return_counts=True)
        scale = (1.0 / counts[where_from.reshape(input.shape)])[..., None].astype(weight.dtype)
    return ops.embedding(weight, input._array, padding_idx, scale, bool(sparse))


def _renorm_rows(weight, rows, max_norm, norm_type):
    with grad_mode.no_grad():
        picked = weight._array[rows]
        norms = np.linalg.norm(picked, ord=norm_type, axis=1, keepdims=True)
        # torch's embedding_renorm_ adds 1e-7 to the norm.
        scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight[rows] = (picked * scale).astype(weight.dtype)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding along a new last dimension; num_classes=-1 means max + 1."""
    tensor = as_tensor(tensor)
    if tensor.dtype.kind not in "iu":
        raise RuntimeError(f"one_hot: expected an integer tensor, got {tensor.dtype}")
    if num_classes == -1:
        num_classes = int(tensor._array.max()) + 1 if tensor._array.size else 0
    _check_indices(tensor._array, num_classes, "one_hot", "num_classes", RuntimeError)
    return Tensor.wrap((tensor._array[..., None] == np.arange(num_classes)).astype(np.int64))


def _bags(input, offsets, include_last_offset):
    """The flat indices and each bag's (start, stop) in them, from 2-D input (a bag per row)
    or 1-D input with offsets."""
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is treated "
                             f"is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets)}")
        bags, width = input.shape
        return input._array.reshape(-1), [(b * width, (b + 1) * width) for b in range(bags)]
    if input.ndim != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.ndim}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    offsets = np.asarray(offsets._array if isinstance(offsets, Tensor) else offsets)
    if offsets.ndim != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    length = input.shape[0]
    if len(offsets) and offsets[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           f"has to start from position 0. However, got {offsets[0]}")
    if len(offsets) and offsets[-1] > length:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {length} but "
                           f"got offsets[-1] of {offsets[-1]}")
    if (np.diff(offsets) < 0).any():
        raise RuntimeError(f"embedding_bag: offsets must not decrease, got {offsets.tolist()}")
    bounds = offsets.tolist() if include_last_offset else offsets.tolist() + [length]
    return input._array, list(zip(bounds[:-1], bounds[1:]))


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """The sum, mean or max of each bag of `weight`'s rows, without the rows in between:
    bags are the rows of 2-D input, or the runs of 1-D input that `offsets` start. Entries
    equal to padding_idx are left out of their bag (and of a mean's count); an empty bag
    gives zeros. per_sample_weights (mode 'sum') scale each looked-up row."""
    if sparse:
        raise NotImplementedError("embedding_bag: sparse gradients are not supported; use "
                                  "sparse=False, or embedding(..., sparse=True) and a sum")
    padding_idx = _checks.embedding_padding_idx("embedding_bag", weight.shape[0], padding_idx)
    if scale_grad_by_freq:
        # torch 2.13's gradient here is not each row's divided by its count (a row seen once
        # can get half, another a third), so rather than differ silently, it is refused.
        raise NotImplementedError("embedding_bag: scale_grad_by_freq is not supported")
    input = as_tensor(input)
    if input.dtype.kind not in "iu":
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {input.dtype} instead "
                           f"(while checking arguments for embedding_bag)")
    if per_sample_weights is not None and tuple(per_sample_weights.shape) != tuple(input.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}"
                         f") is not None, then it must have the same shape as the input "
                         f"({tuple(input.shape)})")
    indices, bags = _bags(input, offsets, include_last_offset)
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}'). Please open a feature request on GitHub.")
    bad = (indices < 0) | (indices >= weight.shape[0])
    if bad.any():
        where = int(np.argmax(bad))
        raise RuntimeError(f"Index {where} of input takes value {indices[where]} which is not in "
                           f"the valid range [0, {weight.shape[0]})")
    # Which looked-up rows each bag holds: padding entries are in none.
    member = np.zeros((len(bags), len(indices)), weight.dtype)
    for b, (start, stop) in enumerate(bags):
        member[b, start:stop] = 1
    if padding_idx is not None:
        member[:, indices == padding_idx] = 0
    rows = embedding(Tensor.wrap(indices), weight, None, max_norm, norm_type)
    if mode == "max":
        # Each bag's winner per column (its first maximum) is found on the values, then
        # gathered, so the gradient goes to it alone, as in torch.
        winners = np.zeros((len(bags), weight.shape[1]), np.int64)
        for b in range(len(bags)):
            (held,) = np.nonzero(member[b])
            if held.size:
                winners[b] = held[rows._array[held].argmax(0)]
        filled = Tensor.wrap(member.any(1, keepdims=True).astype(weight.dtype))
        return rows.gather(0, Tensor.wrap(winners)) * filled
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1)
    if mode == "mean":
        counts = member.sum(1, keepdims=True)
        member /= np.maximum(counts, 1)
    return Tensor.wrap(member) @ rows
