"""Distances between vectors: pairwise_distance and cosine_similarity."""
import numpy as np

from ... import ops
from ...tensor import Tensor
from .. import _checks


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dimension (the eps keeps the norm away from
    0, where its gradient is undefined)."""
    _checks.broadcastable(x1.shape, x2.shape)
    diff = x1 - x2 + eps
    if p in (1, 2):
        return ops.norm(diff, p=p, dim=-1, keepdim=keepdim)
    size = diff.abs()
    if p == np.inf:
        return size.amax(-1, keepdim=keepdim)
    if p == -np.inf:
        return size.amin(-1, keepdim=keepdim)
    if p == 0:
        # The count of nonzero entries: piecewise constant, so its gradient is zero, as in
        # torch (the zero sum keeps the result on the graph).
        count = (size._array != 0).sum(-1, keepdims=keepdim).astype(size.dtype)
        return (size * 0).sum(-1, keepdim=keepdim) + Tensor.wrap(count)
    return (size ** p).sum(-1, keepdim=keepdim) ** (1 / p)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine of the angle between x1 and x2 (broadcast together) along `dim`; each norm is
    clamped below at eps. As in torch, the clamp changes the value only: the gradient is the
    one of the unclamped norm."""
    _checks.broadcastable(x1.shape, x2.shape)
    shape = np.broadcast_shapes(x1.shape, x2.shape)
    unit = []
    for x in (x1, x2):
        x = x.expand(shape)
        norm = ops.norm(x, p=2, dim=dim, keepdim=True)
        unit.append(x / (norm + (ops.clamp(norm, min=eps) - norm).detach()))
    return (unit[0] * unit[1]).sum(dim)
