"""Normalisation: layer, group, batch, instance and RMS norms, and normalize (division by a
p-norm)."""
import contextlib
import numbers

import numpy as np

from ... import ops
from ...autograd import grad_mode
from ...dtypes import check_same_dtype, is_floating_point
from ...ops.autocast import fused


def _normalize(x, mean, var, eps):
    return (x - mean) / (var + eps).sqrt()


_MIXED_DTYPES = "mixed dtype (CPU): all inputs must share same datatype ({} and {})."


@fused()
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalises over the trailing dimensions `normalized_shape` (biased variance)."""
    shape = _trailing_shape(input, normalized_shape)
    check_same_dtype(_MIXED_DTYPES, input, weight, bias)
    _check_affine(shape, weight=weight, bias=bias)
    _check_floating("layer_norm", input)
    return ops.layer_norm(input, weight, bias, dims=len(shape), eps=float(eps))


def _check_affine(shape, **parameters):
    for name, tensor in parameters.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but "
                               f"got {name} of shape {list(tensor.shape)} and normalized_shape "
                               f"= {list(shape)}")


def _check_floating(name, input):
    if not is_floating_point(input.dtype):
        raise RuntimeError(f"{name}: expected a floating point input, got {input.dtype}")


@fused()
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalises each sample's channels (dimension 1) in `num_groups` consecutive groups, each
    over its channels and all spatial positions (biased variance); weight and bias are per
    channel."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    check_same_dtype(_MIXED_DTYPES, input, weight, bias)
    # Each group a row of LayerNorm's fused kernels (mean and variance in one op, not the
    # five of a composition: a (32, 64, 32, 32) float32 input took 4x torch's time).
    grouped = input.reshape(input.shape[0], num_groups, -1)
    out = ops.layer_norm(grouped, None, None, dims=1, eps=float(eps)).reshape(input.shape)
    per_channel = (input.shape[1],) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalises each channel (dimension 1) over the batch and any spatial dimensions.

    In training, batch statistics are used (biased variance) and the running estimates, if
    given, are updated in place: running = (1 - momentum) * running + momentum * batch, with
    the unbiased variance; one op, whose fused backward reads the batch's mean and 1 / std kept
    by its forward. Otherwise the running estimates are used.
    """
    if input.ndim < 2:
        raise RuntimeError(f"batch_norm: expected an input of shape (N, C, ...), got shape "
                           f"{tuple(input.shape)}")
    channels = input.shape[1]
    shape = (1, channels) + (1,) * (input.ndim - 2)
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (channels,):
            raise RuntimeError(f"batch_norm: expected {name} of shape ({channels},) for an "
                               f"input with {channels} channels, got shape {tuple(t.shape)}")
    check_same_dtype(_MIXED_DTYPES, input, running_mean, running_var, weight, bias)
    if training:
        count = input.numel() // channels
        if count <= 1:
            raise ValueError(f"expected more than 1 value per channel when training, got input "
                             f"of shape {tuple(input.shape)}")
        # The kernel moves the running statistics in place (one pass over the batch for
        # them and the output); each buffer counts as written.
        with contextlib.ExitStack() as writes:
            running = [None if t is None else writes.enter_context(t.writing())
                       for t in (running_mean, running_var)]
            tracked = running_mean is not None or running_var is not None
            return ops.batch_norm(input, weight, bias, eps=float(eps),
                                  running=(*running, float(momentum)) if tracked else None)
    if running_mean is None or running_var is None:
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    # In eval, an affine map per channel: input * scale + shift, as torch computes it.
    scale = (running_var + eps).rsqrt()
    if weight is not None:
        scale = scale * weight
    shift = running_mean * scale
    shift = -shift if bias is None else bias - shift
    return ops.named(input * scale.reshape(shape) + shift.reshape(shape),
                     "NativeBatchNormBackward0", input)


def _update_running_stats(running_mean, running_var, mean, var, count, momentum):
    """running = (1 - momentum) * running + momentum * batch, with the unbiased variance of
    the `count` values per channel that `var` (biased) was taken over."""
    with grad_mode.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.reshape(-1), alpha=momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(var.reshape(-1),
                                                alpha=momentum * count / (count - 1))


def _normalize_per_channel(input, mean, var, weight, bias, eps):
    """(input - mean) / sqrt(var + eps) * weight + bias, with one value per channel (dim 1)."""
    shape = (1, input.shape[1]) + (1,) * (input.ndim - 2)
    out = _normalize(input, mean, var, eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalises each sample's channels separately, over their spatial dimensions (biased
    variance). With use_input_stats the running estimates, if given, move towards the
    batch's average of the per-instance statistics (unbiased variance); without, they are
    what normalises."""
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input of shape (N, C, ...) with at least "
                         f"one spatial dimension, got shape {tuple(input.shape)}")
    channels = input.shape[1]
    shape = (1, channels) + (1,) * (input.ndim - 2)
    check_same_dtype(_MIXED_DTYPES, input, running_mean, running_var, weight, bias)
    if use_input_stats:
        count = input.numel() // (input.shape[0] * channels)
        if count <= 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input "
                             f"size {list(input.shape)}")
        # Each instance a row of LayerNorm's fused kernels, as group_norm's groups (a
        # composition of mean, var and the normalisation took 1.8x torch's time with backward).
        instances = input.reshape(input.shape[0], channels, -1)
        out = ops.layer_norm(instances, None, None, dims=1, eps=float(eps)).reshape(input.shape)
        with grad_mode.no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(instances.mean(2).mean(0),
                                                     alpha=momentum)
            if running_var is not None:
                running_var.mul_(1 - momentum).add_(instances.var(2, correction=0).mean(0),
                                                    alpha=momentum * count / (count - 1))
    else:
        out = _normalize(input, running_mean.reshape(shape), running_var.reshape(shape), eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _normalized_shape(normalized_shape):
    return ((normalized_shape,) if isinstance(normalized_shape, numbers.Integral)
            else tuple(normalized_shape))


def _trailing_shape(input, normalized_shape):
    """normalized_shape as a tuple, which must be input's trailing shape."""
    shape = _normalized_shape(normalized_shape)
    if not shape or tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*{', '.join(map(str, shape))}], but got input of size"
                           f"{list(input.shape)}")
    return shape


@fused()
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """input / sqrt(mean(input^2) + eps) over the trailing `normalized_shape` dimensions,
    times weight; eps=None means the machine epsilon of input's dtype, as torch."""
    shape = _trailing_shape(input, normalized_shape)
    check_same_dtype(_MIXED_DTYPES, input, weight)
    _check_affine(shape, weight=weight)
    _check_floating("rms_norm", input)
    if eps is None:
        eps = float(np.finfo(input.dtype).eps)
    return ops.rms_norm(input, weight, dims=len(shape), eps=float(eps))


def _vector_norm(input, p, dim):
    if p in (1, 2):
        return ops.norm(input, p=p, dim=dim, keepdim=True)
    if p == np.inf:
        return input.abs().amax(dim, keepdim=True)
    total = (input.abs() ** p).sum(dim, keepdim=True)
    # The root's derivative is infinite at 0; a zero vector's norm gets torch's zero gradient.
    zero = total == 0
    return ops.where(zero, 0.0, ops.where(zero, 1.0, total) ** (1.0 / p))


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input divided by its p-norm along `dim`, the norm clamped below at eps."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported")
    if not -input.ndim <= dim < max(input.ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-input.ndim}, {input.ndim - 1}], but got {dim})")
    return input / ops.clamp(_vector_norm(input, p, dim), min=eps)
