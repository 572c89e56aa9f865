"""Custom differentiable functions: subclass Function, write forward and backward."""
import functools

import numpy as np

from ..tensor import Tensor
from . import grad_mode
from .graph import Meta, Node, gradient_edge, reduce_to
from .saved_tensors import SavedTensor


class FunctionCtx:
    """The `ctx` that forward and backward share. For the Function's node, it is the node."""

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors (or None), got "
                                f"{type(t).__name__}; store other values as ctx attributes")
        self._saved = tuple(tensors)
        self._saved_versions = tuple(None if t is None else t._version for t in tensors)

    @property
    def saved_tensors(self):
        saved = self._saved  # before the check: another thread's backward may release it
        self.check_not_freed()
        for i, (t, expected) in enumerate(zip(saved, self._saved_versions)):
            if t is not None and t._version != expected:
                raise RuntimeError(
                    f"one of the tensors needed for gradient computation has been modified by "
                    f"an in-place operation: saved tensor {i} of {self.name()} is at version "
                    f"{t._version}; expected version {expected}. Clone it before changing it, or "
                    "use an out-of-place op.")
        return tuple(t.unpack(self) if type(t) is SavedTensor else t for t in saved)

    def mark_dirty(self, *tensors):
        """Declare the inputs forward modified in place; forward must return them, and they
        come back as the same objects with their history continued by this Function."""
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = {id(t) for t in tensors}

    def set_materialize_grads(self, value):
        self._materialize_grads = bool(value)


class BackwardFunction(Node, FunctionCtx):
    """The node recorded for one `Function.apply` call; also its `ctx`."""

    def __init__(self, function, next_edges, needs_input_grad, input_metas):
        Node.__init__(self, next_edges)
        self._function = function
        self.needs_input_grad = needs_input_grad
        self._input_metas = input_metas
        self._output_metas = ()
        self._saved = ()
        self._saved_versions = ()
        self._non_differentiable = set()
        self._dirty = ()
        self._materialize_grads = True

    def name(self):
        return f"{self._function.__name__}Backward"

    @property
    def num_outputs(self):
        return len(self._output_metas)

    def apply(self, grad_outputs):
        self.check_not_freed()
        if self._materialize_grads:
            grad_outputs = [Tensor.wrap(np.zeros(shape, dtype)) if g is None else g
                            for g, (shape, dtype) in zip(grad_outputs, self._output_metas)]
        grads = self._function.backward(self, *grad_outputs)
        if not isinstance(grads, tuple):
            grads = (grads,)
        n_inputs = len(self._input_metas)
        if len(grads) < n_inputs or any(g is not None for g in grads[n_inputs:]):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients "
                               f"(expected {n_inputs}, got {len(grads)})")
        out = []
        for i, (g, meta, edge) in enumerate(zip(grads, self._input_metas, self.next_edges)):
            if g is None or edge is None:
                out.append(None)
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"function {self.name()} returned a {type(g).__name__} as the "
                                f"gradient of input {i}; expected a Tensor or None")
            out.append(reduce_to(g, meta))
        return out

    def release(self):
        if self._saved:
            self._freed = True
            self._saved = ()


class Function:
    """Subclass with `@staticmethod forward(ctx, *args)` and `backward(ctx, *grad_outputs)`,
    then call `MyFunction.apply(*args)`. forward sees plain values (no graph is recorded
    inside it); backward returns one gradient (or None) per forward argument."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass must implement forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("a Function subclass must implement backward to be "
                                  "differentiated")

    @classmethod
    def apply(cls, *args, **kwargs):
        is_tensor = [isinstance(a, Tensor) for a in args]
        needs = tuple(t and a.requires_grad for t, a in zip(is_tensor, args))
        record = grad_mode.is_grad_enabled() and any(needs)
        edges = tuple(gradient_edge(a) if n else None for a, n in zip(args, needs))
        metas = tuple(Meta(a.shape, a.dtype) if t else Meta((), None)
                      for t, a in zip(is_tensor, args))
        ctx = BackwardFunction(cls, edges, needs, metas)
        with grad_mode.no_grad():
            outputs = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs
        if not all(any(d is o for o in outputs) for d in ctx._dirty):
            raise RuntimeError(f"{cls.__name__}: some tensors marked dirty in forward were not "
                               "returned; every input modified in place must be an output")
        if not record:
            return outputs[0] if single else outputs
        results = []
        metas_out = []
        for nr, out in enumerate(outputs):
            if not isinstance(out, Tensor):
                results.append(out)
                metas_out.append(((), np.float64))
                continue
            differentiable = id(out) not in ctx._non_differentiable and out.dtype.kind in "fc"
            if any(out is d for d in ctx._dirty):
                # Modified in place: it keeps its identity and gets new history. The write
                # may have gone around autograd (through `.data`), so mark_dirty is what
                # tells the version counter, as in torch: saved copies of it go stale.
                _check_dirty(cls, out)
                out.mark_written()
            elif any(out is a for a in args):
                # An input returned as-is becomes a new tensor so the input keeps its history.
                out = out.alias(view=False)
            metas_out.append((out.shape, out.dtype))
            if differentiable:
                out.set_history(ctx, nr)
            results.append(out)
        ctx._output_metas = tuple(metas_out)
        hooks = grad_mode._State.saved_tensors_hooks
        if hooks is not None and ctx._saved:
            ctx._saved = tuple(_saved_for(hooks, t, outputs) for t in ctx._saved)
        return results[0] if single else tuple(results)


def _check_dirty(cls, tensor):
    if tensor.grad_fn is None and tensor.requires_grad:
        raise RuntimeError(f"{cls.__name__}: a leaf tensor that requires grad was modified in "
                           "place (mark_dirty); pass a clone, or do it under no_grad.")
    if tensor._base is not None:
        raise RuntimeError(f"{cls.__name__}: an input marked dirty is a view of another tensor, "
                           "whose history would not follow; pass a clone of the view.")


def once_differentiable(backward):
    """Decorate a Function's backward that is not itself differentiable: it runs without
    recording, and differentiating its result (create_graph=True, then backward again)
    raises instead of silently giving a zero second derivative."""
    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with grad_mode.no_grad():
            grads = backward(ctx, *grad_outputs)
        if not grad_mode.is_grad_enabled() or not any(
                isinstance(g, Tensor) and g.requires_grad for g in grad_outputs):
            return grads
        grads = grads if isinstance(grads, tuple) else (grads,)
        return _DelayedError.apply(*[None if g is None else g.detach().requires_grad_()
                                     for g in grads])
    return wrapper


class _DelayedError(Function):
    """Passes values through; its backward is the error once_differentiable promises."""

    @staticmethod
    def forward(ctx, *values):
        return values

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("trying to differentiate twice a function that was marked with "
                           "@once_differentiable")


def _saved_for(hooks, tensor, outputs):
    """What ctx keeps of a saved tensor while saved_tensors_hooks are active (as in torch, the
    hooks see what forward saved once it has returned)."""
    if tensor is None:
        return None
    for nr, out in enumerate(outputs):
        if out is tensor:
            return SavedTensor(hooks, tensor, nr)
    return SavedTensor(hooks, tensor, gradient_edge(tensor) if tensor.requires_grad else None)
