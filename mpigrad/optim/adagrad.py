"""Adagrad: per-coordinate steps shrinking with the sum of all past squared gradients."""

import numpy as np

from .. import kernels
from ..tensor import Tensor
from . import sparse_steps
from .optimizer import Optimizer, check_implementation, check_non_negative

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """torch.optim.Adagrad: the same arguments, update rule and state.

    With gradient g of parameter p (negated if `maximize`), at step t::

        g = g + weight_decay * p
        s = s + g * g                                    # sum
        p = p - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)

    As in torch, the state exists from construction: `state[p]` holds `step`
    (a Python int, 0 before the first step; torch keeps a 0-d tensor) and `sum`,
    filled with `initial_accumulator_value`. A sparse gradient (Embedding(sparse=True)'s)
    updates only its rows, as torch's (optim/sparse_steps.py).
    """
    sparse_refusal = None
    _update_sparse = sparse_steps.adagrad

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None):
        check_implementation("Adagrad", foreach, fused, differentiable)
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value,
                    "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                    "fused": fused}
        super().__init__(params, defaults)
        for group in self.param_groups:
            for param in group["params"]:
                self.state[param] = {
                    "step": 0,
                    "sum": Tensor(np.full_like(param._array, group["initial_accumulator_value"])),
                }

    def _check_hyperparameters(self, group):
        check_non_negative(group, "lr", "lr_decay", "weight_decay", "initial_accumulator_value",
                           "eps")

    def _update(self, param, grad, group):
        state = self.state[param]
        state["step"] += 1
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        kernels.current().forwards["adagrad_update"](
            param._array, grad, state["sum"]._array, clr, group["weight_decay"], group["eps"],
            group["maximize"])
