"""Adam and AdamW (Adam with decoupled weight decay)."""

import numpy as np

from .. import kernels
from ..tensor import Tensor
from .optimizer import Optimizer, check_implementation

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """torch.optim.Adam: the same arguments, update rule and state.

    With gradient g of parameter p (negated if `maximize`), at step t::

        p = p * (1 - lr * weight_decay)   if decoupled_weight_decay
        g = g + weight_decay * p          otherwise
        m = lerp(m, g, 1 - beta1)                 # exp_avg
        v = beta2 * v + (1 - beta2) * g * g       # exp_avg_sq
        v_max = max(v_max, v)                     # max_exp_avg_sq, if amsgrad
        p = p - lr / (1 - beta1**t) * m / (sqrt(v or v_max) / sqrt(1 - beta2**t) + eps)

    `state[p]` holds `step` (a Python int; torch keeps a 0-d tensor),
    `exp_avg`, `exp_avg_sq` and, with amsgrad, `max_exp_avg_sq`. Each parameter is
    updated in one pass (the backend's `adam_update` kernel: all of the above per element),
    whatever `foreach` and `fused` say.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        check_implementation(type(self).__name__, foreach, fused, differentiable)
        if capturable:
            raise NotImplementedError(f"{type(self).__name__}: capturable=True (CUDA graphs) "
                                      "is not supported")
        # foreach, fused, capturable and differentiable change nothing here; they are kept in
        # the groups as torch keeps them (its repr and state_dict show them).
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach,
                    "capturable": capturable, "differentiable": differentiable, "fused": fused,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        if not 0.0 <= group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 <= group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")
        if len(group["betas"]) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {group['betas']!r}")
        for i, beta in enumerate(group["betas"]):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")

    def _update(self, param, grad, group):
        p = param._array
        beta1, beta2 = group["betas"]
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["exp_avg"] = Tensor(np.zeros_like(p))
            state["exp_avg_sq"] = Tensor(np.zeros_like(p))
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = Tensor(np.zeros_like(p))
        state["step"] += 1
        step = state["step"]
        decay_factor = 1.0
        weight_decay = group["weight_decay"]
        if group["decoupled_weight_decay"]:
            decay_factor = 1 - group["lr"] * weight_decay if weight_decay != 0 else 1.0
            weight_decay = 0.0
        kernels.current().forwards["adam_update"](
            p, grad, state["exp_avg"]._array, state["exp_avg_sq"]._array,
            state["max_exp_avg_sq"]._array if group["amsgrad"] else None,
            group["lr"] / (1 - beta1 ** step), (1 - beta2 ** step) ** 0.5, beta1, beta2,
            group["eps"], decay_factor, weight_decay, group["maximize"])


class AdamW(Adam):
    """torch.optim.AdamW: Adam whose weight decay shrinks the parameters
    directly (`p *= 1 - lr * weight_decay`) instead of adding to the
    gradient, with a default `weight_decay` of 1e-2."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         foreach=foreach, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)
