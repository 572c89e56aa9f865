"""RMSprop: steps divided by a running root mean square of the gradients."""

import numpy as np

from .. import kernels
from ..tensor import Tensor
from .optimizer import Optimizer, check_capturable, check_implementation, check_non_negative

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """torch.optim.RMSprop: the same arguments, update rule and state.

    With gradient g of parameter p (negated if `maximize`)::

        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g              # square_avg
        a = lerp(a, g, 1 - alpha)                        # grad_avg, if centered
        d = sqrt(v - a * a  if centered  else  v) + eps
        b = momentum * b + g / d                         # momentum_buffer, if momentum > 0
        p = p - lr * (b  if momentum > 0  else  g / d)

    `state[p]` holds `step` (a Python int; torch keeps a 0-d tensor),
    `square_avg`, and `momentum_buffer` and `grad_avg` when used.
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        check_implementation("RMSprop", foreach, None, differentiable)
        defaults = {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps,
                    "centered": centered, "weight_decay": weight_decay,
                    "capturable": capturable, "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        check_non_negative(group, "lr", "eps", "momentum", "weight_decay", "alpha")

    def _update(self, param, grad, group):
        check_capturable(group)
        p = param._array
        momentum = group["momentum"]
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["square_avg"] = Tensor(np.zeros_like(p))
            if momentum > 0:
                state["momentum_buffer"] = Tensor(np.zeros_like(p))
            if group["centered"]:
                state["grad_avg"] = Tensor(np.zeros_like(p))
        state["step"] += 1
        kernels.current().forwards["rmsprop_update"](
            p, grad, state["square_avg"]._array,
            state["grad_avg"]._array if group["centered"] else None,
            state["momentum_buffer"]._array if momentum > 0 else None,
            group["lr"], group["alpha"], group["eps"], group["weight_decay"], momentum,
            group["maximize"])
