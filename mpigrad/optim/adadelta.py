"""Adadelta: per-coordinate steps sized by running averages of squared gradients and updates."""

import numpy as np

from .. import kernels
from ..tensor import Tensor
from .optimizer import Optimizer, check_capturable, check_implementation, check_non_negative

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """torch.optim.Adadelta: the same arguments, update rule and state.

    With gradient g of parameter p (negated if `maximize`)::

        g = g + weight_decay * p
        v = rho * v + (1 - rho) * g * g                  # square_avg
        delta = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta          # acc_delta
        p = p - lr * delta

    `state[p]` holds `step` (a Python int; torch keeps a 0-d tensor),
    `square_avg` and `acc_delta`.
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        check_implementation("Adadelta", foreach, None, differentiable)
        defaults = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                    "maximize": maximize, "foreach": foreach, "capturable": capturable,
                    "differentiable": differentiable}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        check_non_negative(group, "lr")
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Invalid rho value: {group['rho']}")
        check_non_negative(group, "eps", "weight_decay")

    def _update(self, param, grad, group):
        check_capturable(group)
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["square_avg"] = Tensor(np.zeros_like(param._array))
            state["acc_delta"] = Tensor(np.zeros_like(param._array))
        state["step"] += 1
        kernels.current().forwards["adadelta_update"](
            param._array, grad, state["square_avg"]._array, state["acc_delta"]._array,
            group["lr"], group["rho"], group["eps"], group["weight_decay"], group["maximize"])
