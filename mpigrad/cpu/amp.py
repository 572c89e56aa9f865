"""torch.cpu.amp: the older spelling of torch.amp with the device fixed to the CPU."""
import functools

from ..amp import GradScaler as _GradScaler
from ..amp import autocast as _autocast
from .. import dtypes


class autocast(_autocast):
    def __init__(self, enabled=True, dtype=dtypes.bfloat16, cache_enabled=True):
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    @functools.wraps(_GradScaler.__init__)
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__("cpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
