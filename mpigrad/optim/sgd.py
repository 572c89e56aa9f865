"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
import numpy as np

from .. import kernels
from ..tensor import Tensor
from .optimizer import Optimizer, check_implementation

__all__ = ["SGD"]


class SGD(Optimizer):
    """torch.optim.SGD: the same arguments, update rule and state.

    With gradient g of parameter p (negated if `maximize`)::

        g = g + weight_decay * p
        b = g                                   on the first step
        b = momentum * b + (1 - dampening) * g  afterwards
        g = g + momentum * b  if nesterov  else  b
        p = p - lr * g

    The momentum buffer is `state[p]['momentum_buffer']`, kept only when
    `momentum != 0`. Each parameter is updated in one pass (the backend's `sgd_update`
    kernel: all of the above per element), whatever `foreach` and `fused` say.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        check_implementation("SGD", foreach, fused, differentiable)
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
                    "foreach": foreach, "differentiable": differentiable, "fused": fused}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        if group["lr"] < 0.0:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if group["momentum"] < 0.0:
            raise ValueError(f"Invalid momentum value: {group['momentum']}")
        if group["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _update(self, param, grad, group):
        momentum = group["momentum"]
        buffer, first = None, False
        if momentum != 0:
            state = self.state[param]
            if state.get("momentum_buffer") is None:
                # torch starts the buffer at the first gradient, not at zero.
                state["momentum_buffer"] = Tensor(np.empty_like(param._array))
                first = True
            buffer = state["momentum_buffer"]._array
        kernels.current().forwards["sgd_update"](
            param._array, grad, buffer, group["lr"], momentum, group["dampening"],
            group["weight_decay"], group["nesterov"], group["maximize"], first)
