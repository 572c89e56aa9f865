"""Normalisation layers: batch statistics (BatchNorm, SyncBatchNorm) and per-sample statistics
(LayerNorm)."""
import numbers
import sys
import warnings

import numpy as np

from .. import creation
from ..ops import cat, stack
from ..tensor import Tensor
from . import functional as F, init
from ._checks import check_device, positive_int
from .functional.normalization import (_normalize_per_channel, _normalized_shape,
                                       _update_running_stats)
from .module import Module
from .parameter import Parameter


class _BatchNorm(Module):
    """Shared by BatchNorm1d/2d, which differ only in the input ranks they accept.

    With track_running_stats, running_mean/running_var are buffers updated in training and
    used in eval; momentum=None means a cumulative average over num_batches_tracked batches.
    """

    _ranks = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        layer = type(self).__name__
        check_device(device, layer)
        self.num_features = positive_int("num_features", num_features, layer)
        if momentum is not None and not 0 <= momentum <= 1:
            raise ValueError(f"{layer}: momentum must be in [0, 1] or None, got {momentum!r}")
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(creation.empty(num_features, dtype=dtype))
            self.register_parameter(
                "bias", Parameter(creation.empty(num_features, dtype=dtype)) if bias else None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", creation.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", creation.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", Tensor(np.array(0, np.int64)))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        if input.ndim not in self._ranks:
            ranks = " or ".join(f"{r}-D" for r in self._ranks)
            raise ValueError(f"{type(self).__name__}: expected {ranks} input, got shape "
                             f"{tuple(input.shape)}")
        return self._batch_norm(input)

    def _check_channels(self, input):
        if input.shape[1] != self.num_features:
            raise RuntimeError(f"{type(self).__name__}: expected input with {self.num_features} "
                               f"channels, got {input.shape[1]} (input shape "
                               f"{tuple(input.shape)})")

    def _step_running_stats(self):
        """Count this training batch; the momentum its statistics enter the running ones with."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / int(self.num_batches_tracked)
        return factor

    def _batch_norm(self, input):
        self._check_channels(input)
        factor = self._step_running_stats()
        # Without running statistics there is nothing else to normalise by, even in eval.
        use_batch_stats = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None,
                            self.running_var if track else None, self.weight, self.bias,
                            use_batch_stats, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) input."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) input, per channel."""

    _ranks = (4,)


class SyncBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics are those of the whole batch across the ranks of
    `process_group` (the default group when None), as torch's: under DistributedDataParallel,
    N ranks with B/N samples each normalise, update the running statistics and get gradients
    exactly as one process with the B samples would.

    Each rank sends its per-channel mean, biased variance and count in one differentiable
    all_gather (distributed.nn.functional), and the batch's statistics are combined from them
    (mean of means weighted by count; variances plus the spread of the means), so backward
    carries every rank's share of the gradient back to the others. Without an initialised
    group of more than one rank, in eval, or without batch statistics, it is BatchNorm.
    Input of any rank from 2 up (N, C, ...), on the CPU (torch's runs on GPUs only)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)
        self.process_group = process_group

    def forward(self, input):
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")
        group = self._group_to_sync()
        if group is None:
            return self._batch_norm(input)
        self._check_channels(input)
        factor = self._step_running_stats()
        mean, var, count = self._statistics_over(group, input)
        if self.track_running_stats:
            _update_running_stats(self.running_mean, self.running_var, mean, var, count, factor)
        return _normalize_per_channel(input, mean, var, self.weight, self.bias, self.eps)

    def _group_to_sync(self):
        """The process group to take statistics over, or None to behave as BatchNorm."""
        if not self.training:
            return None
        # Looked up, not imported: if no script has imported mpigrad.distributed there is no
        # process group, and importing it here would start MPI under a launcher.
        distributed = sys.modules.get("mpigrad.distributed")
        if distributed is None or not distributed.is_initialized():
            return None
        group = self.process_group or distributed.group.WORLD
        return group if distributed.get_world_size(group) > 1 else None

    def _statistics_over(self, group, input):
        # Here, not at the top: nn sits below distributed in the layers (docs/architecture.md), and
        # only a synchronised forward needs it, once a process group exists.
        from ..distributed.nn.functional import all_gather
        channels = input.shape[1]
        count = input.numel() // channels
        if count < 1:
            raise ValueError(f"SyncBatchNorm: an empty batch (input shape {tuple(input.shape)})")
        dims = (0,) + tuple(range(2, input.ndim))
        mean = input.mean(dims)
        var = input.var(dims, correction=0)
        counts = creation.full((1,), float(count), dtype=input.dtype)
        everyone = stack(all_gather(cat([mean, var, counts]), group=group))
        means, variances = everyone[:, :channels], everyone[:, channels:2 * channels]
        weights = everyone[:, 2 * channels:]
        total = int(weights.sum().item())
        if total <= 1:
            raise ValueError(f"expected more than 1 value per channel when training, got "
                             f"{total} over the ranks of the group")
        shares = weights / total
        batch_mean = (shares * means).sum(0)
        batch_var = (shares * (variances + (means - batch_mean) ** 2)).sum(0)
        shape = (1, channels) + (1,) * (input.ndim - 2)
        return batch_mean.reshape(shape), batch_var.reshape(shape), total

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """`module` with every BatchNorm*d in it (itself included) replaced by a SyncBatchNorm
        holding the same parameters, buffers and training mode, as torch's."""
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, (cls, _InstanceNorm)):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                converted.weight = module.weight
                converted.bias = module.bias
            if module.track_running_stats:
                converted.running_mean = module.running_mean
                converted.running_var = module.running_var
                converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted


class _InstanceNorm(_BatchNorm):
    """Shared by InstanceNorm1d/2d: per-sample, per-channel statistics. The parameters and
    buffers are BatchNorm's (so torch's state dicts load), off by default; `_ranks` is (the
    unbatched rank, the batched one)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def forward(self, input):
        unbatched, batched = self._ranks
        if input.ndim not in self._ranks:
            raise ValueError(f"expected {unbatched}D or {batched}D input (got {input.ndim}D "
                             f"input)")
        feature_dim = input.ndim - unbatched
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You "
                          f"can silence this warning by not passing in num_features, which is "
                          f"not used because affine=False", stacklevel=2)
        x = input.unsqueeze(0) if input.ndim == unbatched else input
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats,
                              0.0 if self.momentum is None else self.momentum, self.eps)
        return out.squeeze(0) if input.ndim == unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of (N, C, L) or unbatched (C, L) input."""

    _ranks = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of (N, C, H, W) or unbatched (C, H, W) input."""

    _ranks = (3, 4)


class _AffineNorm(Module):
    """A normalisation followed by an optional weight (init 1) and bias (init 0)."""

    def _affine_parameters(self, shape, affine, bias, dtype):
        if affine:
            self.weight = Parameter(creation.ones(shape, dtype=dtype))
            self.register_parameter(
                "bias", Parameter(creation.zeros(shape, dtype=dtype)) if bias else None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)


class LayerNorm(_AffineNorm):
    """Normalises each sample over its trailing `normalized_shape` dimensions, then applies an
    elementwise weight and bias of that shape."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        check_device(device, "LayerNorm")
        shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) \
            else tuple(normalized_shape)
        if not shape:
            raise ValueError("LayerNorm: normalized_shape must name at least one dimension")
        self.normalized_shape = tuple(positive_int("normalized_shape", s, "LayerNorm")
                                      for s in shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self._affine_parameters(self.normalized_shape, elementwise_affine, bias, dtype)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    """Divides each sample by the root mean square over its trailing `normalized_shape`
    dimensions, then applies an elementwise weight of that shape; eps=None means the machine
    epsilon of the input's dtype."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        check_device(device, "RMSNorm")
        self.normalized_shape = tuple(positive_int("normalized_shape", s, "RMSNorm")
                                      for s in _normalized_shape(normalized_shape))
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(creation.ones(self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")



class GroupNorm(_AffineNorm):
    """Normalises each sample's channels in `num_groups` groups (see F.group_norm), then
    applies a per-channel weight and bias."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, bias=True, device=None,
                 dtype=None):
        super().__init__()
        check_device(device, "GroupNorm")
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        self._affine_parameters(num_channels, affine, bias, dtype)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")
