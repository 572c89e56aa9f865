"""The steps SGD and Adagrad take on a sparse gradient (Embedding(sparse=True)'s), as torch's
single-tensor code for them: written with the sparse tensor's own arithmetic (mpigrad.sparse),
so only the rows the gradient holds change. (SparseAdam, which takes nothing else, keeps its
step in sparse_adam.py.)"""
import numpy as np

from ..autograd.grad_mode import no_grad
from ..sparse import SparseTensor


def sgd(optimizer, param, grad, group):
    """torch's SGD on a sparse gradient: `grad + weight_decay * param` is torch's error (a
    sparse plus a dense), the momentum buffer is a sparse tensor (cloned from the first
    gradient, then `buf * momentum + (1 - dampening) * grad` with sparse adds), and the
    parameter gets `-lr` times the result added row by row."""
    if group["maximize"]:
        grad = -grad
    if group["weight_decay"] != 0:
        grad = grad + param  # raises torch's "add(sparse, dense) is not supported"
    momentum = group["momentum"]
    if momentum != 0:
        state = optimizer.state[param]
        buffer = state.get("momentum_buffer")
        if buffer is None:
            buffer = state["momentum_buffer"] = grad.clone()
        else:
            if not buffer.is_sparse:
                raise RuntimeError("SGD: the momentum buffer is dense (an earlier step had a "
                                   "dense gradient), and this gradient is sparse; torch "
                                   "cannot add them either")
            buffer.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
        grad = grad.add(buffer, alpha=momentum) if group["nesterov"] else buffer
    with no_grad():
        param.add_(grad, alpha=-group["lr"])


def adagrad(optimizer, param, grad, group):
    """torch's Adagrad on a sparse gradient, coalesced first: each held row's sum of squares
    grows by its gradient squared, and the row moves by -clr * g / (sqrt(sum) + eps)."""
    state = optimizer.state[param]
    state["step"] += 1
    if group["maximize"]:
        grad = -grad
    if group["weight_decay"] != 0:
        raise RuntimeError("weight_decay option is not compatible with sparse gradients")
    clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
    grad = grad.coalesce()
    rows = tuple(grad._sparse_indices)
    values = grad._sparse_values
    total = state["sum"]._array
    total[rows] += values * values
    std = np.sqrt(total[rows])
    std += group["eps"]
    step = SparseTensor.make(grad._sparse_indices, values / std, grad.shape, True)
    with no_grad():
        param.add_(step, alpha=-clr)
