"""Gradient clipping, with torch.nn.utils' names, arithmetic and errors.

Norms are taken by the backend's kernels on the gradients' storage, outside autograd (torch
runs them under no_grad too): one pass over each gradient into one float64 total, rounded to
the gradients' dtype (torch takes each gradient's norm in its dtype, then the norm of those).
Gradients are scaled in place through `writing()`, so their versions move as torch's do.
Under DistributedDataParallel the gradients are already averaged when backward returns, so
every rank computes the same norm and clips identically. A parameter class may define
`_total_grad_norm(parameters, norm_type, error_if_nonfinite)` for pieces of tensors sharded
across ranks: FSDP's shards do, so clip_grad_norm_ gives the full model's norm on every rank.
"""
import numpy as np

from ... import kernels
from ...tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]


def _as_list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _gradients(parameters):
    return [p.grad for p in _as_list(parameters) if p.grad is not None]


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The `norm_type`-norm of all of `tensors` together (as if concatenated), a 0-dim Tensor."""
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return Tensor(np.array(0.0, dtype=np.float32))
    arrays = [t._array for t in tensors]
    total = kernels.current().forwards["total_norm"](arrays, norm_type).astype(
        np.result_type(*arrays))
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the gradients "
            "by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return Tensor(total)


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients of `parameters` by max_norm / (total_norm + 1e-6), at most 1."""
    gradients = _gradients(parameters)
    if not gradients:
        return
    total = np.asarray(total_norm._array if isinstance(total_norm, Tensor) else total_norm)
    coefficient = np.minimum(total.dtype.type(float(max_norm)) / (total + total.dtype.type(1e-6)),
                             total.dtype.type(1.0))
    scale_ = kernels.current().forwards["scale_"]
    for gradient in gradients:
        # A non-finite norm scales into NaNs, as in torch.
        with gradient.writing() as array:
            scale_(array, coefficient)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scale the gradients of `parameters` in place so their total norm is at most `max_norm`;
    returns the total norm before clipping (a 0-dim Tensor)."""
    parameters = _as_list(parameters)
    # Parameters that are pieces of larger tensors spread over ranks (FSDP's shards) say how
    # their pieces' norms combine into the full tensors' (collectively, on every rank).
    total_of = next((type(p)._total_grad_norm for p in parameters
                     if hasattr(type(p), "_total_grad_norm")), None)
    if total_of is not None:
        total = total_of(parameters, norm_type, error_if_nonfinite)
        clip_grads_with_norm_(parameters, max_norm, total, foreach)
        return total
    gradients = _gradients(parameters)
    if not gradients:
        return Tensor(np.array(0.0, dtype=np.float32))
    total = get_total_norm(gradients, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient of `parameters` to [-clip_value, clip_value] in place."""
    clip_value = float(clip_value)
    for gradient in _gradients(parameters):
        with gradient.writing() as array:
            np.clip(array, -clip_value, clip_value, out=array)
