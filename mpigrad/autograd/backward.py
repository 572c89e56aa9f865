"""backward() and grad(): a reverse pass from user code, checked and handed to the engine."""
import numpy as np

from ..tensor import Tensor
from .engine import run_backward
from .graph import gradient_edge


def _tensors_as_tuple(x):
    """A tensor, a list or tuple of them, or None, as a tuple."""
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _root_grads(outputs, grad_outputs):
    grad_outputs = _tensors_as_tuple(grad_outputs) or (None,) * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(grad_outputs)} gradients for {len(outputs)} outputs")
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if out._array.size != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs; "
                                   f"output {i} has shape {tuple(out.shape)}, so pass a gradient "
                                   "of that shape")
            g = Tensor.wrap(np.ones(out.shape, out.dtype))
        else:
            g = g if isinstance(g, Tensor) else Tensor(g)
            if g.shape != out.shape:
                raise RuntimeError(f"mismatch in shape: the gradient for output {i} has shape "
                                   f"{tuple(g.shape)} but the output has shape {tuple(out.shape)}")
        grads.append(g)
    return grads


def _edges(tensors, what):
    edges = []
    for i, t in enumerate(tensors):
        edge = gradient_edge(t)
        if edge is None:
            raise RuntimeError(f"element {i} of {what} does not require grad and does not have "
                               "a grad_fn")
        edges.append(edge)
    return edges


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaf) into every leaf's `.grad` (or only `inputs`' if given)."""
    tensors = _tensors_as_tuple(tensors)
    grads = _root_grads(tensors, grad_tensors)
    retain_graph = create_graph if retain_graph is None else retain_graph
    roots = _edges(tensors, "tensors")
    if inputs is None:
        run_backward(roots, grads, retain_graph, create_graph)
        return
    inputs = _tensors_as_tuple(inputs)
    for t, g in zip(inputs, run_backward(roots, grads, retain_graph, create_graph,
                                         _edges(inputs, "inputs"))):
        if g is not None:
            t.grad = g if t.grad is None else t.grad + g


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False, materialize_grads=False):
    """The gradients of `outputs` with respect to `inputs`, returned, not accumulated."""
    outputs, inputs = _tensors_as_tuple(outputs), _tensors_as_tuple(inputs)
    grads = _root_grads(outputs, grad_outputs)
    retain_graph = create_graph if retain_graph is None else retain_graph
    results = run_backward(_edges(outputs, "outputs"), grads, retain_graph, create_graph,
                           _edges(inputs, "inputs"))
    out = []
    for i, (t, g) in enumerate(zip(inputs, results)):
        if g is None:
            if materialize_grads:
                g = Tensor.wrap(np.zeros(t.shape, t.dtype))
            elif not allow_unused:
                raise RuntimeError(f"input {i} was not used in the graph of the outputs; pass "
                                   "allow_unused=True if this is expected")
        elif not create_graph and g.requires_grad:
            g = g.detach()
        out.append(g)
    return tuple(out)
