"""torch.cuda.amp: CUDA's autocast and GradScaler. There is no CUDA here, so, as torch on a
machine without it, both warn and do nothing: the script runs in float32."""
import functools
import warnings

from .. import dtypes
from ..amp import GradScaler as _GradScaler
from ..amp import autocast as _autocast


class autocast(_autocast):
    def __init__(self, enabled=True, dtype=dtypes.float16, cache_enabled=True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    @functools.wraps(_GradScaler.__init__)
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
