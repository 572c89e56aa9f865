"""Higher-level derivatives of a function: vjp, jvp, jacobian, hessian, hvp, vhp.

Every function takes `func(*inputs)` and works on detached copies of `inputs`, so the
caller's tensors are never part of the graph built here (as torch.autograd.functional does).
"""
import numpy as np

from .. import ops
from ..tensor import Tensor
from . import forward_ad, grad_mode
from .backward import grad as _grad


def _as_tuple_and_form(x):
    """(x as a tuple, whether x was a tuple or list), so results can be unpacked the same way."""
    return (tuple(x), True) if isinstance(x, (tuple, list)) else ((x,), False)


def _prepare(inputs):
    return tuple(x.detach().requires_grad_(True) for x in inputs)


def _fill(grads, like):
    return tuple(Tensor.wrap(np.zeros(x.shape, x.dtype)) if g is None else g
                 for g, x in zip(grads, like))


def _unpack(values, was_tuple):
    return values if was_tuple else values[0]


def _finish(t, create_graph):
    return t if create_graph else t.detach()


def vjp(func, inputs, v=None, create_graph=False):
    """(func(inputs), v^T J)."""
    inputs, inputs_tuple = _as_tuple_and_form(inputs)
    with grad_mode.enable_grad():
        xs = _prepare(inputs)
        outputs, outputs_tuple = _as_tuple_and_form(func(*xs))
        v = _as_tuple_and_form(v)[0] if v is not None else None
        grads = _grad(outputs, xs, v, create_graph=create_graph, allow_unused=True)
    grads = _fill(grads, xs)
    return (_unpack(tuple(_finish(o, create_graph) for o in outputs), outputs_tuple),
            _unpack(tuple(_finish(g, create_graph) for g in grads), inputs_tuple))


def forward_jvp(func, primals, tangents, create_graph=False):
    """Push `tangents` through `func(*primals)` in one forward pass with dual tensors.

    Returns (outputs, output tangents, whether func returned a tuple), zeros where an output
    does not depend on the primals. As with torch, func sees inputs that require grad and may
    differentiate them itself (autograd.grad inside a jvp gives Hessian-vector products); the
    graph is dropped unless `create_graph`. Shared by `jvp` here and `mpigrad.func`.
    """
    if len(tangents) != len(primals):
        raise RuntimeError(f"jvp: got {len(tangents)} tangents for {len(primals)} inputs")
    for i, (x, t) in enumerate(zip(primals, tangents)):
        if not isinstance(t, Tensor) or t.shape != x.shape:
            raise RuntimeError(f"jvp: the tangent for input {i} must be a tensor of the input's "
                               f"shape {tuple(x.shape)}, got {getattr(t, 'shape', type(t))}")
    if forward_ad.active_level() is not None:
        raise RuntimeError("jvp uses forward-mode AD, and dual levels do not nest: call it "
                           "outside the `with forward_ad.dual_level():` block")
    with grad_mode.enable_grad(), forward_ad.dual_level():
        duals = tuple(forward_ad.make_dual(x.detach().requires_grad_(True), t.to(x.dtype))
                      for x, t in zip(primals, tangents))
        outputs, outputs_tuple = _as_tuple_and_form(func(*duals))
        unpacked = [forward_ad.unpack_dual(o) for o in outputs]
        primal_outputs = tuple(u.primal for u in unpacked)
        jv = tuple(Tensor.wrap(np.zeros(o.shape, o.dtype)) if u.tangent is None else u.tangent
                   for o, u in zip(outputs, unpacked))
    return primal_outputs, jv, outputs_tuple


def jvp(func, inputs, v=None, create_graph=False):
    """(func(inputs), J v), in one forward pass with dual tensors (forward-mode AD). As in
    torch, func gets inputs that require grad (so it may take gradients itself); the graph it
    records is dropped unless `create_graph`."""
    inputs, inputs_tuple = _as_tuple_and_form(inputs)
    if v is None:
        if any(x._array.size != 1 for x in inputs):
            raise RuntimeError("jvp: v may be omitted only when every input has one element")
        v = tuple(Tensor.wrap(np.ones(x.shape, x.dtype)) for x in inputs)
    v = _as_tuple_and_form(v)[0]
    outputs, jv, outputs_tuple = forward_jvp(func, inputs, v, create_graph)
    return (_unpack(tuple(_finish(o, create_graph) for o in outputs), outputs_tuple),
            _unpack(tuple(_finish(j, create_graph) for j in jv), outputs_tuple))


def forward_jacobian(func, inputs, position, create_graph=False):
    """(d outputs[i] / d inputs[position] for each output, of shape outputs[i].shape +
    inputs[position].shape; whether func returned a tuple), by forward mode: one forward pass
    per element of that input, each pushing one basis tangent."""
    x = inputs[position]

    def of_x(value):
        return func(*inputs[:position], value, *inputs[position + 1:])

    columns = []
    for k in range(x._array.size):
        seed = np.zeros(x._array.size, x.dtype)
        seed[k] = 1
        outputs, jv, outputs_tuple = forward_jvp(of_x, (x,), (Tensor.wrap(seed.reshape(x.shape)),),
                                                 create_graph)
        columns.append(jv)
    return tuple(_finish(ops.stack([c[i] for c in columns], dim=-1).reshape(out.shape + x.shape),
                         create_graph) for i, out in enumerate(outputs)), outputs_tuple


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """J[i][j] of shape outputs[i].shape + inputs[j].shape (unnested where func and inputs are
    single tensors). `strategy="forward-mode"` builds it a column at a time with dual tensors
    (fewer passes when the inputs have fewer elements than the outputs); `strict` and
    `vectorize` are accepted for torch's signature and change nothing."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError(f"jacobian: strategy must be 'reverse-mode' or 'forward-mode', got "
                         f"{strategy!r}")
    inputs, inputs_tuple = _as_tuple_and_form(inputs)
    if strategy == "forward-mode":
        per_input = [forward_jacobian(func, inputs, j, create_graph) for j in range(len(inputs))]
        outputs_tuple = per_input[0][1]
        rows = tuple(_unpack(tuple(column[0][i] for column in per_input), inputs_tuple)
                     for i in range(len(per_input[0][0])))
        return _unpack(rows, outputs_tuple)
    with grad_mode.enable_grad():
        xs = _prepare(inputs)
        outputs, outputs_tuple = _as_tuple_and_form(func(*xs))
        rows = []
        for out in outputs:
            per_input = [[] for _ in xs]
            for k in range(out._array.size):
                seed = np.zeros(out._array.size, out.dtype)
                seed[k] = 1
                grads = _grad(out, xs, Tensor.wrap(seed.reshape(out.shape)), retain_graph=True,
                              create_graph=create_graph, allow_unused=True)
                for j, g in enumerate(_fill(grads, xs)):
                    per_input[j].append(g)
            rows.append(tuple(_finish(ops.stack(gs).reshape(out.shape + x.shape), create_graph)
                              if gs else Tensor.wrap(np.zeros(out.shape + x.shape, x.dtype))
                              for gs, x in zip(per_input, xs)))
    rows = tuple(_unpack(r, inputs_tuple) for r in rows)
    return _unpack(rows, outputs_tuple)


def hessian(func, inputs, create_graph=False):
    """The Jacobian of the gradient of a scalar function."""
    inputs, inputs_tuple = _as_tuple_and_form(inputs)

    def gradient(*xs):
        out = func(*xs)
        if out._array.size != 1:
            raise RuntimeError(f"hessian: func must return a single-element tensor, got shape "
                               f"{tuple(out.shape)}")
        return _fill(_grad(out, xs, create_graph=True, allow_unused=True), xs)

    jac = jacobian(gradient, inputs if inputs_tuple else inputs[0], create_graph=create_graph)
    return jac if inputs_tuple else jac[0]


def hvp(func, inputs, v, create_graph=False):
    """(func(inputs), H v) for a scalar func; H is symmetric, so this is also v^T H."""
    inputs, inputs_tuple = _as_tuple_and_form(inputs)
    v, _ = _as_tuple_and_form(v)
    with grad_mode.enable_grad():
        xs = _prepare(inputs)
        out = func(*xs)
        grads = _fill(_grad(out, xs, create_graph=True, allow_unused=True), xs)
        pairs = [(g, vi) for g, vi in zip(grads, v) if g.requires_grad]
        hv = _grad([g for g, _ in pairs], xs, [vi for _, vi in pairs],
                   create_graph=create_graph, allow_unused=True) if pairs else (None,) * len(xs)
    hv = _fill(hv, xs)
    return (_finish(out, create_graph),
            _unpack(tuple(_finish(h, create_graph) for h in hv), inputs_tuple))


vhp = hvp
