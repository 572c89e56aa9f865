"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""

from ..tensor import Tensor
from .optimizer import Optimizer, regularized_grad

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
    `momentum != 0`.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False):
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
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
        p = param.data
        lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
        g = regularized_grad(p, grad, group["weight_decay"], group["maximize"])
        if momentum != 0:
            state = self.state[param]
            buffer = state.get("momentum_buffer")
            if buffer is None:
                # torch starts the buffer at the first gradient, not at zero.
                buffer = state["momentum_buffer"] = Tensor(g.copy())
                b = buffer.data
            else:
                b = buffer.data
                b *= momentum
                b += g if dampening == 0 else (1 - dampening) * g
            if group["nesterov"]:
                lookahead = momentum * b
                lookahead += g
                g = lookahead
            else:
                g = b
        p -= lr * g
