"""Check analytical derivatives, reverse mode (gradients) and forward mode (tangents), against
central finite differences (in float64)."""
import warnings

import numpy as np

from ..dtypes import is_floating_point
from ..tensor import Tensor
from . import forward_ad
from .backward import _tensors_as_tuple
from .backward import grad as autograd_grad


class GradcheckError(RuntimeError):
    pass


def _differentiable_outputs(func, inputs):
    return tuple(o for o in _tensors_as_tuple(func(*inputs)) if isinstance(o, Tensor) and
                 is_floating_point(o.dtype))


def _numerical_jacobian(func, inputs, wrt, eps):
    """jac[input][output]: (output numel, input numel) central differences.

    Grad mode stays on: the function may itself differentiate (gradgradcheck's does).
    """
    jac = []
    for x in wrt:
        flat = x._array.reshape(-1)
        columns = []
        for j in range(flat.size):
            original = flat[j]
            flat[j] = original + eps
            plus = [o._array.copy() for o in _differentiable_outputs(func, inputs)]
            flat[j] = original - eps
            minus = [o._array.copy() for o in _differentiable_outputs(func, inputs)]
            flat[j] = original
            columns.append([((p - m) / (2 * eps)).reshape(-1) for p, m in zip(plus, minus)])
        jac.append([np.stack([c[k] for c in columns], axis=1) for k in range(len(columns[0]))]
                   if columns else [])
    return jac


def _analytical_jacobian(outputs, wrt):
    jac = [[np.zeros((o._array.size, x._array.size)) for o in outputs] for x in wrt]
    for k, out in enumerate(outputs):
        for row in range(out._array.size):
            seed = np.zeros(out._array.size, dtype=out.dtype)
            seed[row] = 1
            grads = autograd_grad(out, wrt, Tensor.wrap(seed.reshape(out.shape)),
                                  retain_graph=True, allow_unused=True)
            for i, g in enumerate(grads):
                if g is not None:
                    jac[i][k][row] = g._array.reshape(-1)
    return jac


def _forward_jacobian(func, inputs, wrt):
    """The same Jacobian, a column per forward pass: one input element's tangent set to 1."""
    outputs = _differentiable_outputs(func, inputs)
    jac = [[np.zeros((o._array.size, x._array.size)) for o in outputs] for x in wrt]
    positions = [next(p for p, a in enumerate(inputs) if a is x) for x in wrt]
    for i, (x, position) in enumerate(zip(wrt, positions)):
        for column in range(x._array.size):
            seed = np.zeros(x._array.size, dtype=x.dtype)
            seed[column] = 1
            with forward_ad.dual_level():
                args = list(inputs)
                args[position] = forward_ad.make_dual(x, Tensor.wrap(seed.reshape(x.shape)))
                for k, out in enumerate(_differentiable_outputs(func, args)):
                    tangent = forward_ad.unpack_dual(out).tangent
                    if tangent is not None:
                        jac[i][k][:, column] = tangent._array.reshape(-1)
    return jac


def gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              check_forward_ad=False, check_backward_ad=True):
    """True if every analytical Jacobian entry matches finite differences within
    `atol + rtol * |numerical|`; otherwise raise (or return False) naming the worst entry.
    The analytical Jacobian comes from backward (`check_backward_ad`), from the tangent rules
    (`check_forward_ad`), or both."""
    inputs = _tensors_as_tuple(inputs)
    wrt = [x for x in inputs if getattr(x, "requires_grad", False)]
    if not wrt:
        raise ValueError("gradcheck: no input requires grad, so there is nothing to check")
    if any(x.dtype != np.float64 for x in wrt):
        warnings.warn("gradcheck: inputs are not float64; finite differences in lower "
                      "precision will likely fail. Use .double() inputs.", stacklevel=2)
    outputs = _differentiable_outputs(func, inputs)
    if not any(o.requires_grad for o in outputs):
        raise GradcheckError("gradcheck: no output requires grad; the function does not "
                             "depend differentiably on its inputs")
    numerical = _numerical_jacobian(func, inputs, wrt, eps)
    modes = []
    if check_backward_ad:
        modes.append(("backward", _analytical_jacobian(outputs, wrt)))
    if check_forward_ad:
        modes.append(("forward", _forward_jacobian(func, inputs, wrt)))
    for mode, analytical in modes:
        message = _worst_mismatch(analytical, numerical, atol, rtol)
        if message is not None:
            if raise_exception:
                raise GradcheckError(f"{mode} mode AD: {message}")
            return False
    return True


def _worst_mismatch(analytical, numerical, atol, rtol):
    worst = None
    for i, (a_row, n_row) in enumerate(zip(analytical, numerical)):
        for k, (a, n) in enumerate(zip(a_row, n_row)):
            excess = np.abs(a - n) - (atol + rtol * np.abs(n))
            if excess.size and excess.max() > 0:
                r, c = np.unravel_index(np.argmax(excess), excess.shape)
                if worst is None or excess[r, c] > worst[0]:
                    worst = (excess[r, c], i, k, r, c, n[r, c], a[r, c])
    if worst is None:
        return None
    _, i, k, r, c, num, ana = worst
    return (f"Jacobian mismatch for output {k} with respect to input {i} (of those that "
            f"require grad): worst at output element {r}, input element {c}: numerical "
            f"{num:.10g}, analytical {ana:.10g} (atol={atol}, rtol={rtol})")


def gradgradcheck(func, inputs, grad_outputs=None, eps=1e-6, atol=1e-5, rtol=1e-3,
                  raise_exception=True, seed=0):
    """gradcheck of the gradient itself: checks second derivatives (create_graph=True)."""
    inputs = _tensors_as_tuple(inputs)
    outputs = _differentiable_outputs(func, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(Tensor(rng.standard_normal(o.shape), dtype=o.dtype,
                                    requires_grad=True) for o in outputs)
    grad_outputs = _tensors_as_tuple(grad_outputs)
    n = len(inputs)
    wrt_positions = [i for i, x in enumerate(inputs) if getattr(x, "requires_grad", False)]

    def first_derivative(*args):
        xs, gos = args[:n], args[n:]
        outs = _differentiable_outputs(func, xs)
        grads = autograd_grad(outs, [xs[i] for i in wrt_positions], gos, create_graph=True,
                              allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps, atol, rtol, raise_exception)
