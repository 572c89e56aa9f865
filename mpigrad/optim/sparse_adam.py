"""SparseAdam: Adam for sparse gradients (Embedding(sparse=True)'s), updating lazily."""
import math

import numpy as np

from ..autograd.grad_mode import no_grad
from ..sparse import SparseTensor
from ..tensor import Tensor
from .optimizer import Optimizer

__all__ = ["SparseAdam"]


class SparseAdam(Optimizer):
    """torch.optim.SparseAdam: the same arguments, update rule and state.

    Only the rows a step's gradient holds are touched ("lazy" Adam): their moments move
    toward that gradient and the rows step, while the other rows' moments stay as they are
    (decaying no further) until a gradient reaches them again. With the gradient coalesced
    to rows g (negated if `maximize`) and that parameter's step count t::

        m[rows] += (1 - beta1) * (g - m[rows])
        v[rows] += (1 - beta2) * (g * g - v[rows])
        p[rows] -= lr * sqrt(1 - beta2 ** t) / (1 - beta1 ** t) * m[rows] / (sqrt(v[rows]) + eps)

    `state[p]` holds `step` (a Python int, as torch's), `exp_avg` and `exp_avg_sq`. Every
    gradient must be sparse: a dense one is torch's RuntimeError (use Adam).
    """
    sparse_refusal = None

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "maximize": maximize}
        super().__init__(params, defaults)
        sparse_params = [[g, i] for g, group in enumerate(self.param_groups)
                         for i, p in enumerate(group["params"]) if p.is_sparse]
        if sparse_params:
            raise ValueError(f"Sparse params at indices {sparse_params}: SparseAdam requires "
                             "dense parameter tensors")

    def _check_hyperparameters(self, group):
        if not 0.0 < group["lr"]:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not 0.0 < group["eps"]:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")
        for i, beta in enumerate(group["betas"]):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")

    def step(self, closure=None):
        for group in self.param_groups:
            if any(p.grad is not None and not p.grad.is_sparse for p in group["params"]):
                raise RuntimeError("SparseAdam does not support dense gradients, please "
                                   "consider Adam instead")
        return super().step(closure)

    def _update_sparse(self, param, grad, group):
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["exp_avg"] = Tensor(np.zeros_like(param._array))
            state["exp_avg_sq"] = Tensor(np.zeros_like(param._array))
        state["step"] += 1
        if group["maximize"]:
            grad = -grad
        grad = grad.coalesce()
        if grad._nnz() == 0:
            return  # the step still counts, as torch's
        beta1, beta2 = group["betas"]
        rows = tuple(grad._sparse_indices)
        g = grad._sparse_values
        exp_avg, exp_avg_sq = state["exp_avg"]._array, state["exp_avg_sq"]._array
        # torch's order of operations, so float32 rounds as torch's does.
        old_avg = exp_avg[rows]
        avg_step = (g - old_avg) * (1 - beta1)
        exp_avg[rows] += avg_step
        old_sq = exp_avg_sq[rows]
        sq_step = (g * g - old_sq) * (1 - beta2)
        exp_avg_sq[rows] += sq_step
        numerator = avg_step + old_avg
        denominator = np.sqrt(sq_step + old_sq)
        denominator += group["eps"]
        step = state["step"]
        step_size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
        update = (numerator / denominator) * -step_size
        with no_grad():
            param.add_(SparseTensor.make(grad._sparse_indices, update, grad.shape, True))
