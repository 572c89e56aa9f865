"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
import numpy as np

from ..tensor import Tensor
from .optimizer import Optimizer, WorkArrays, blocks, check_implementation, regularized_grad

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
    `momentum != 0`. Each parameter is updated block by block (all of the above on one
    cache-sized block before the next), whatever `foreach` and `fused` say.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        check_implementation("SGD", foreach, fused, differentiable)
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
        super().__init__(params, defaults)
        self._work = WorkArrays()

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
        lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
        weight_decay, maximize, nesterov = (group["weight_decay"], group["maximize"],
                                            group["nesterov"])
        arrays = (param._array, grad)
        first = False
        if momentum != 0:
            state = self.state[param]
            buffer = state.get("momentum_buffer")
            if buffer is None:
                # torch starts the buffer at the first gradient, not at zero.
                buffer = state["momentum_buffer"] = Tensor(np.empty_like(param._array))
                first = True
            arrays += (buffer._array,)
        for p, g, *b in blocks(*arrays):
            g = regularized_grad(p, g, weight_decay, maximize, out=self._work.like(p, 0))
            step = self._work.like(p, 1)
            if momentum != 0:
                b, = b
                if first:
                    np.copyto(b, g)
                elif dampening == 0:
                    b *= momentum
                    b += g
                else:
                    b *= momentum
                    b += np.multiply(g, 1 - dampening, out=step)
                if nesterov:
                    g = np.add(g, np.multiply(b, momentum, out=step), out=step)
                else:
                    g = b
            p -= np.multiply(g, lr, out=step)
