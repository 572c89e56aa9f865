"""torch.amp: autocast and GradScaler, on the CPU."""
from .autocast_mode import (autocast, custom_bwd, custom_fwd, get_autocast_dtype,  # noqa: F401
                            is_autocast_available, is_autocast_enabled)
from .grad_scaler import GradScaler  # noqa: F401
