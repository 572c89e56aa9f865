"""Rprop: per-coordinate step sizes that grow while a gradient keeps its sign, shrink when it
flips; only the gradient's sign moves the parameter."""

import numpy as np

from ..tensor import Tensor
from .optimizer import Optimizer, check_capturable, check_implementation, check_non_negative

__all__ = ["Rprop"]


def real_view(array):
    """A complex array as its interleaved real and imaginary parts, which torch's Rprop and
    ASGD update as independent real numbers; a real array as itself."""
    return array.view(array.real.dtype) if np.iscomplexobj(array) else array


class Rprop(Optimizer):
    """torch.optim.Rprop: the same arguments, update rule and state.

    With gradient g of parameter p (negated if `maximize`) and etas (eta_minus, eta_plus)::

        s = sign(g * prev)                           # +, -, 0
        step_size = clamp(step_size * (eta_plus | eta_minus | 1), *step_sizes)
        g = 0 where s < 0                            # a flipped sign waits one step
        p = p - sign(g) * step_size
        prev = g

    `state[p]` holds `step` (a Python int; torch keeps a 0-d tensor), `prev` and
    `step_size` (lr everywhere to start).
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        check_implementation("Rprop", foreach, None, differentiable)
        defaults = {"lr": lr, "etas": etas, "step_sizes": step_sizes, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable,
                    "capturable": capturable}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        check_non_negative(group, "lr")
        eta_minus, eta_plus = group["etas"]
        if not 0.0 < eta_minus < 1.0 < eta_plus:
            raise ValueError(f"Invalid eta values: {eta_minus}, {eta_plus}")

    def _update(self, param, grad, group):
        check_capturable(group, "params and state_steps")
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["prev"] = Tensor(np.zeros_like(param._array))
            lr = float(group["lr"])
            fill = complex(lr, lr) if np.iscomplexobj(param._array) else lr
            state["step_size"] = Tensor(np.full_like(param._array, fill))
        state["step"] += 1
        eta_minus, eta_plus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        p = real_view(param._array)
        prev = real_view(state["prev"]._array)
        step_size = real_view(state["step_size"]._array)
        grad = -real_view(grad) if group["maximize"] else real_view(grad)
        with np.errstate(invalid="ignore", over="ignore"):
            sign = np.sign(grad * prev)
            factor = np.where(sign > 0, eta_plus,
                              np.where(sign < 0, eta_minus, np.where(sign == 0, 1, sign)))
            np.clip(step_size * factor.astype(p.dtype), step_size_min, step_size_max,
                    out=step_size)
            grad = np.where(sign < 0, 0, grad).astype(p.dtype, copy=False)
            p -= np.sign(grad) * step_size
        prev[...] = grad
