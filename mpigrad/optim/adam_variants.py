"""Adam's relatives: NAdam (Nesterov momentum), RAdam (rectified variance) and Adamax
(infinity norm), each with torch.optim's arguments, update rule and state.

They share Adam's first moment (`exp_avg`, a lerp toward the gradient) and its checks of the
hyper-parameters; each differs in how the step is scaled. Each parameter is updated in one
pass (the backend's `nadam_update`, `radam_update` and `adamax_update` kernels), whatever
`foreach` says.
"""
import math

import numpy as np

from .. import kernels
from ..dtypes import get_default_dtype
from ..tensor import Tensor
from .adam import Adam
from .optimizer import Optimizer, check_capturable, check_implementation, decay_split

__all__ = ["NAdam", "RAdam", "Adamax"]


class _AdamFamily(Optimizer):
    """Shared construction and per-parameter state of the three; a subclass writes `_update`."""

    _check_hyperparameters = Adam._check_hyperparameters

    def __init__(self, params, defaults, foreach, differentiable, capturable):
        check_implementation(type(self).__name__, foreach, None, differentiable)
        # torch's flags sit in the groups too, so state dicts have torch's keys.
        super().__init__(params, {**defaults, "foreach": foreach, "capturable": capturable,
                                  "differentiable": differentiable})

    def _state(self, param, group, second_moment, **scalars):
        check_capturable(group, "params, mu_products and state_steps" if scalars
                         else "params and state_steps")
        state = self.state[param]
        if not state:
            state["step"] = 0
            state.update(scalars)
            state["exp_avg"] = Tensor(np.zeros_like(param._array))
            state[second_moment] = Tensor(np.zeros_like(param._array))
        state["step"] += 1
        return state


class NAdam(_AdamFamily):
    """torch.optim.NAdam: Adam with Nesterov momentum, whose momentum coefficient warms up as
    mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay)). State: `step`, `mu_product`
    (the product of the mu_t so far; torch keeps 0-d tensors for both), `exp_avg`,
    `exp_avg_sq`."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay, "momentum_decay": momentum_decay,
                                  "decoupled_weight_decay": decoupled_weight_decay,
                                  "maximize": maximize},
                         foreach, differentiable, capturable)

    def _update(self, param, grad, group):
        # torch keeps mu_product as a 0-d tensor of its scalar dtype (float32 unless the
        # default dtype is float64) and multiplies in that precision: so do we, or the
        # parameters drift apart at 1e-8.
        scalar = np.float64 if get_default_dtype() == np.float64 else np.float32
        state = self._state(param, group, "exp_avg_sq", mu_product=scalar(1.0))
        lr, eps = group["lr"], group["eps"]
        beta1, beta2 = group["betas"]
        step, decay = state["step"], group["momentum_decay"]
        bias_correction2 = 1 - beta2 ** step
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay))
        state["mu_product"] = state["mu_product"] * state["mu_product"].dtype.type(mu)
        mu_product = float(state["mu_product"])
        grad_scale = -lr * (1.0 - mu) / (1.0 - mu_product)
        momentum_scale = -lr * mu_next / (1.0 - mu_product * mu_next)
        kernels.current().forwards["nadam_update"](
            param._array, grad, state["exp_avg"]._array, state["exp_avg_sq"]._array,
            grad_scale, momentum_scale, bias_correction2, beta1, beta2, eps,
            *decay_split(group, group["decoupled_weight_decay"]), group["maximize"])


class RAdam(_AdamFamily):
    """torch.optim.RAdam: Adam whose adaptive step is switched on only once the variance of
    the adaptive lr is tractable (rho_t > 5), and rectified by sqrt of a ratio of rhos;
    before that, SGD with bias-corrected momentum. State: `step`, `exp_avg`, `exp_avg_sq`."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay,
                                  "decoupled_weight_decay": decoupled_weight_decay,
                                  "maximize": maximize},
                         foreach, differentiable, capturable)

    def _update(self, param, grad, group):
        state = self._state(param, group, "exp_avg_sq")
        lr, eps = group["lr"], group["eps"]
        beta1, beta2 = group["betas"]
        step = state["step"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        rect = None
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                             / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        kernels.current().forwards["radam_update"](
            param._array, grad, state["exp_avg"]._array, state["exp_avg_sq"]._array, lr,
            bias_correction1, bias_correction2 ** 0.5, rect, beta1, beta2, eps,
            *decay_split(group, group["decoupled_weight_decay"]), group["maximize"])


class Adamax(_AdamFamily):
    """torch.optim.Adamax: Adam with the infinity norm, u = max(beta2 * u, |g| + eps), and
    the step lr / (1 - beta1**t) * m / u. State: `step`, `exp_avg`, `exp_inf`."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay, "maximize": maximize},
                         foreach, differentiable, capturable)

    def _update(self, param, grad, group):
        state = self._state(param, group, "exp_inf")
        beta1, beta2 = group["betas"]
        clr = group["lr"] / (1 - beta1 ** state["step"])
        kernels.current().forwards["adamax_update"](
            param._array, grad, state["exp_avg"]._array, state["exp_inf"]._array, clr, beta1,
            beta2, group["eps"], group["weight_decay"], group["maximize"])
