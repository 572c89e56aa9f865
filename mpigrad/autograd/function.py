"""Custom differentiable functions: subclass Function, write forward and backward."""
import functools

import numpy as np

from .. import dtypes
from ..tensor import Tensor
from . import forward_ad, grad_mode
from .graph import Meta, Node, gradient_edge, reduce_to
from .saved_tensors import SavedTensor


def _check_saveable(tensors, what):
    for t in tensors:
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{what} can only save tensors (or None), got {type(t).__name__}; "
                            "store other values as ctx attributes")


class FunctionCtx:
    """The `ctx` that forward, backward and jvp share. For the Function's node, it is the node."""

    # What save_for_forward kept, and whether jvp is running (then saved_tensors returns it).
    _saved_for_forward = ()
    _in_jvp = False

    def save_for_backward(self, *tensors):
        _check_saveable(tensors, "save_for_backward")
        self._saved = tuple(tensors)
        self._saved_versions = tuple(None if t is None else t._version for t in tensors)

    def save_for_forward(self, *tensors):
        """Tensors for jvp, which reads them as `ctx.saved_tensors`."""
        _check_saveable(tensors, "save_for_forward")
        self._saved_for_forward = tuple(tensors)

    @property
    def saved_tensors(self):
        if self._in_jvp:
            return self._saved_for_forward
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
    inside it, no tangent propagated); backward returns one gradient (or None) per forward
    argument. For forward-mode AD, `jvp(ctx, *tangents)` gets one tangent per forward argument
    (zeros for a tensor without one, None for a non-tensor) and returns one per output."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass must implement forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("a Function subclass must implement backward to be "
                                  "differentiated")

    @staticmethod
    def jvp(ctx, *tangents):
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        is_tensor = [isinstance(a, Tensor) for a in args]
        needs = tuple(t and a.requires_grad for t, a in zip(is_tensor, args))
        record = grad_mode.is_grad_enabled() and any(needs)
        edges = tuple(gradient_edge(a) if n else None for a, n in zip(args, needs))
        metas = tuple(Meta(a.shape, a.dtype) if t else Meta((), None)
                      for t, a in zip(is_tensor, args))
        ctx = BackwardFunction(cls, edges, needs, metas)
        level = forward_ad.active_level()
        tangents = [forward_ad.tangent_of(a, level) for a in args] if level is not None else ()
        dual = any(t is not None for t in tangents)
        if dual and cls.jvp is Function.jvp:
            # Before forward runs: a forward with side effects (a collective) happens or not.
            raise RuntimeError(f"{cls.__name__} was used on dual tensors (forward-mode AD) but "
                               "implements no jvp: you must implement the jvp function for "
                               "custom autograd.Function to use it with forward mode AD.")
        with grad_mode.no_grad(), forward_ad.paused():
            outputs = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs
        if not all(any(d is o for o in outputs) for d in ctx._dirty):
            raise RuntimeError(f"{cls.__name__}: some tensors marked dirty in forward were not "
                               "returned; every input modified in place must be an output")
        # The write may have gone around autograd (through `.data`), so mark_dirty is what
        # tells the version counter, recording or not, as in torch: saved copies go stale.
        for tensor in ctx._dirty:
            tensor.mark_written()
        if not record and not dual:
            return outputs[0] if single else outputs
        results = []
        metas_out = []
        for nr, out in enumerate(outputs):
            if not isinstance(out, Tensor):
                results.append(out)
                metas_out.append(((), np.float64))
                continue
            differentiable = (id(out) not in ctx._non_differentiable
                              and dtypes.is_differentiable(out.dtype))
            if any(out is d for d in ctx._dirty):
                if record:  # modified in place: it keeps its identity and gets new history
                    _check_dirty(cls, out)
            elif any(out is a for a in args):
                # An input returned as-is becomes a new tensor so the input keeps its history.
                out = out.alias(view=False)
            metas_out.append((out.shape, out.dtype))
            if differentiable and record:
                out.set_history(ctx, nr)
            results.append(out)
        ctx._output_metas = tuple(metas_out)
        hooks = grad_mode._State.saved_tensors_hooks
        if hooks is not None and ctx._saved:
            ctx._saved = tuple(_saved_for(hooks, t, outputs) for t in ctx._saved)
        if dual:
            _push_tangents(cls, ctx, args, tangents, results, level)
        return results[0] if single else tuple(results)


def _push_tangents(cls, ctx, args, tangents, results, level):
    """Run the Function's jvp and give each differentiable output its tangent."""
    if ctx._materialize_grads:
        tangents = [Tensor.wrap(np.zeros(a.shape, a.dtype))
                    if t is None and isinstance(a, Tensor) else t for t, a in zip(tangents, args)]
    ctx._in_jvp = True
    try:
        with forward_ad.paused():
            out_tangents = cls.jvp(ctx, *tangents)
    finally:
        ctx._in_jvp = False
    if not isinstance(out_tangents, tuple):
        out_tangents = (out_tangents,)
    if len(out_tangents) != len(results):
        raise RuntimeError(f"{cls.__name__}.jvp returned {len(out_tangents)} tangents for "
                           f"{len(results)} outputs; return one per output (None for none)")
    for i, (out, t) in enumerate(zip(results, out_tangents)):
        if (t is None or not isinstance(out, Tensor) or not dtypes.is_differentiable(out.dtype)
                or id(out) in ctx._non_differentiable):
            continue
        if not isinstance(t, Tensor) or t.shape != out.shape:
            raise RuntimeError(f"{cls.__name__}.jvp: the tangent of output {i} must be a tensor "
                               f"of the output's shape {tuple(out.shape)}, got "
                               f"{getattr(t, 'shape', type(t).__name__)}")
        if any(s is not None and np.may_share_memory(t._array, s._array) for s in tangents):
            t = t.clone()  # an output's tangent must not be an input's, which may change in place
        level.set(out, t if t.dtype == out.dtype else t.to(out.dtype))


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
