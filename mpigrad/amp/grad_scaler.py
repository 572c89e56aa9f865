"""torch.amp.GradScaler: loss scaling for 16-bit training, skipping steps whose gradients
overflowed. The arithmetic is torch's: the scale is a float32, its inverse is taken in float64
and rounded to float32, gradients are multiplied by it in their own dtype."""
import enum
import warnings

import numpy as np

from .. import dtypes
from ..tensor import Tensor


class _Stage(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


class GradScaler:
    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        self._device = device
        self._enabled = enabled
        if enabled and device != "cpu":
            # torch's answer on a machine without the device: a warning, and no scaling.
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                          "Disabling.", stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._scale = None          # float32, made on the first scale()
        self._growth_tracker = 0    # successful (finite) steps since the scale last changed
        self._per_optimizer = {}    # id(optimizer) -> {"stage", "found_inf"}

    def is_enabled(self):
        return self._enabled

    def _state_of(self, optimizer):
        return self._per_optimizer.setdefault(id(optimizer),
                                              {"stage": _Stage.READY, "found_inf": None})

    def scale(self, outputs):
        """`outputs` (a tensor, or nested lists and tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = np.float32(self._init_scale)
        if isinstance(outputs, Tensor):
            return outputs * Tensor.wrap(np.array(self._scale))
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _check_scaled(self, what):
        if self._scale is None:
            raise AssertionError(f"Attempted {what} but _scale is None. This may indicate your "
                                 "script did not use scaler.scale(loss or outputs) earlier in "
                                 "the iteration.")

    def unscale_(self, optimizer):
        """Divide `optimizer`'s gradients by the scale in place and note whether any is inf or
        nan. At most once per optimizer between two update() calls, and before step()."""
        if not self._enabled:
            return
        self._check_scaled("unscale_")
        state = self._state_of(optimizer)
        if state["stage"] is _Stage.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if state["stage"] is _Stage.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = np.float32(1.0 / np.float64(self._scale))
        found_inf = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.dtype == dtypes.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                # A sparse gradient (Embedding(sparse=True)'s) unscales its values, as torch's.
                target = p.grad._values() if p.grad.is_sparse else p.grad
                with target.writing() as grad:
                    if not np.isfinite(grad).all():
                        found_inf = True
                    # In float32 (float64 for float64), rounded once to the gradient's dtype.
                    wide = np.float64 if grad.dtype == np.float64 else np.float32
                    np.copyto(grad, (grad.astype(wide) * inv_scale).astype(grad.dtype))
        state["found_inf"] = found_inf
        state["stage"] = _Stage.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless done already), then `optimizer.step()` unless a gradient was inf or
        nan: then the step is skipped and None returned."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_scaled("step")
        state = self._state_of(optimizer)
        if state["stage"] is _Stage.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _Stage.READY:
            self.unscale_(optimizer)
        result = None
        if not state["found_inf"]:
            result = optimizer.step(*args, **kwargs)
        state["stage"] = _Stage.STEPPED
        return result

    def update(self, new_scale=None):
        """Back the scale off after an overflow, grow it after `growth_interval` clean steps
        (or set it to `new_scale`); ends the iteration for every optimizer."""
        if not self._enabled:
            return
        self._check_scaled("update")
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1:
                    raise AssertionError("new_scale should be a single-element tensor")
                new_scale = new_scale.item()
            self._scale = np.float32(new_scale)
        else:
            found = [s["found_inf"] for s in self._per_optimizer.values()
                     if s["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(found):
                self._scale = np.float32(self._scale * np.float32(self._backoff_factor))
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale = np.float32(self._scale * np.float32(self._growth_factor))
                    self._growth_tracker = 0
        self._per_optimizer = {}

    def get_scale(self):
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._growth_tracker = int(state_dict["_growth_tracker"])
        if self._scale is not None:
            self._scale = np.float32(self._init_scale)
