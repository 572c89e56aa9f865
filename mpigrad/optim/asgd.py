"""ASGD: SGD with a decaying step and a running (Polyak) average of the iterates."""

import numpy as np

from .. import dtypes
from ..tensor import Tensor
from .optimizer import Optimizer, check_capturable, check_implementation, check_non_negative
from .rprop import real_view

__all__ = ["ASGD"]


def _scalar_dtype():
    """torch keeps ASGD's eta and mu as 0-d tensors of this dtype, so its arithmetic reads
    them rounded to it: float32 unless the default dtype is float64."""
    return dtypes.float64 if dtypes.get_default_dtype() == dtypes.float64 else dtypes.float32


class ASGD(Optimizer):
    """torch.optim.ASGD: the same arguments, update rule and state.

    With gradient g of parameter p (negated if `maximize`), at step t::

        g = g + weight_decay * p
        p = p * (1 - lambd * eta) - eta * g
        ax = p  if mu == 1  else  ax + mu * (p - ax)   # the averaged iterate
        eta = lr / (1 + lambd * lr * t) ** alpha
        mu = 1 / max(1, t - t0)

    `state[p]` holds `step` (a Python int; torch keeps a 0-d tensor), `eta` and `mu` (0-d
    tensors of torch's scalar dtype, whose rounding the update sees, as torch's) and `ax`.
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        check_implementation("ASGD", foreach, None, differentiable)
        defaults = {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0,
                    "weight_decay": weight_decay, "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable, "capturable": capturable}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        check_non_negative(group, "lr", "weight_decay")

    def _update(self, param, grad, group):
        check_capturable(group, "params, mus, etas, and state_steps")
        state = self.state[param]
        lr = float(group["lr"])
        if not state:
            state["step"] = 0
            state["eta"] = Tensor(np.asarray(lr, dtype=_scalar_dtype()))
            state["mu"] = Tensor(np.ones((), dtype=_scalar_dtype()))
            state["ax"] = Tensor(np.zeros_like(param._array))
        state["step"] += 1
        step = state["step"]
        p, ax = real_view(param._array), real_view(state["ax"]._array)
        grad = -real_view(grad) if group["maximize"] else real_view(grad)
        if group["weight_decay"] != 0:
            grad = grad + group["weight_decay"] * p
        eta = float(state["eta"]._array)
        p *= 1 - group["lambd"] * eta
        p -= eta * grad
        mu = state["mu"]._array
        if mu != 1:
            ax += (p - ax) * mu.astype(p.dtype)
        else:
            ax[...] = p
        lambd, alpha, t0 = group["lambd"], group["alpha"], group["t0"]
        state["eta"]._array[...] = lr / ((1 + lambd * lr * step) ** alpha)
        state["mu"]._array[...] = 1 / max(1, step - t0)
