"""How an op runs and records itself. The rules themselves live in the sibling modules.

An `Op` is a forward kernel plus one vector-Jacobian product per input, written with Tensor
operations so that a gradient is itself differentiable (`create_graph=True`). Each VJP is
called as `vjp(g, ans, *inputs, **params)`; inputs the op does not declare in `saves` arrive as
`Meta` (shape and dtype only), so a rule cannot silently read a value that was not saved.
Broadcasting and dtype are undone once, in `reduce_to`, never inside the rules.

Beside each VJP sits the op's tangent rule (forward mode, see autograd/forward_ad.py): one
Jacobian-vector product per input, `jvp(t, ans, *inputs, **params)`, giving input's tangent
`t`'s contribution to the output's tangent; the contributions are added and broadcast to the
output's shape and dtype once, here. Tangent rules also use Tensor operations, so tangents are
differentiable in reverse mode and the rules compose. They run with propagation paused, so
their ops read the inputs' primal values.

The forward itself is not the Op's: it is looked up by the op's name in the active backend's
kernel table (`mpigrad.kernels`, numpy by default), and so is a fused backward, which runs
instead of the gradient rules when no graph of the gradient is wanted (create_graph=False)
and no dual level is active. A forward kernel may return `(out, kept)`: `kept`, what it
computed on the way that its fused backward needs (LayerNorm's mean and rstd), is held by the
node and handed to that backward as `kept=`, so the backward need not compute it again.
"""
import inspect

import numpy as np

from .. import dtypes
from ..autograd import forward_ad, grad_mode, profiler
from ..autograd.graph import Meta, Node, gradient_edge, reduce_to
from ..autograd.saved_tensors import SavedTensor
from ..kernels import NUMPY, selected
from ..tensor import Tensor


# torch's ops are silent about division by zero, log(0) and overflow (they answer inf or nan);
# numpy's warn. Ops run with numpy's floating-point errors ignored, set through the context
# variable np.errstate itself sets (0.15 us an op where entering an errstate costs 1.2 us, a
# third of a small op), or through np.errstate where numpy does not have it. The op's path
# writes `token = _np_errors.set(_IGNORE_ERRORS)` ... `_np_errors.reset(token)` out in full:
# helper functions around the two calls cost as much again.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _np_errors
    with np.errstate(all="ignore"):
        _IGNORE_ERRORS = _np_errors.get()
except ImportError:  # another numpy: the documented, slower way, behind the same two calls
    class _Errstate:
        def set(self, settings):
            state = np.errstate(**settings)
            state.__enter__()
            return state

        def reset(self, state):
            state.__exit__(None, None, None)

    _np_errors = _Errstate()
    _IGNORE_ERRORS = {"all": "ignore"}


_wrap = Tensor.wrap  # bound once: run makes every op's result with it

# Every Op by name, so tests can check that each one has a gradcheck case and a tangent rule.
REGISTRY = {}
# forward_ad's global state: ops read `_dual.level` (None unless a dual level is active).
_dual = forward_ad._global


class Op:
    """A differentiable primitive.

    `forward` is the numpy backend's forward kernel, put into `kernels.NUMPY` under the op's
    name; None when a module of `kernels/` registers it there (the longer kernels). Either
    way the op runs whatever the active backend holds under its name.
    `vjps` is a tuple with one rule per positional input (None where no gradient flows), or,
    for variadic ops, one callable taking the input's position first. `saves` names the
    forward's parameters (and/or "ans", the output) whose values the rules read, or is "*"
    for all of a variadic op's inputs; backward checks that none of them changed in place
    since. `view=True` marks ops whose output may
    share storage with input 0, so both share one version counter. `inplace_fast(target,
    *others, **params)` writes the result straight into target's array when no graph is
    recorded (the optimizer path); without it, the result is computed and copied in. It is a
    kernel too, registered in `kernels.NUMPY.inplace`. `backward` is the numpy backend's
    fused backward where a one-liner beside the rules serves (`kernels.NUMPY.backwards`).
    An op whose input's gradient is the output's gradient placed into zeros (a slice's) may
    have a scatter kernel, `scatter(buffer, g, **params)` in `kernels.NUMPY.scatters`, which
    adds g at those places into `buffer`, an array of the input's shape, in place. Backward
    uses it instead of the rule when the input's gradient so far is an array only backward
    holds, so that the pieces of a split meet in one array, with no zeros and no sums of
    whole arrays.
    `grad_fn_name` is what the node prints as, torch's name for it (`MmBackward0`), or a
    function of the op's keyword parameters when torch names the variants apart
    (`SumBackward0` for a full sum, `SumBackward1` along dims), or of the parameters and the
    positional inputs (`lambda params, args: ...`) when an input decides; by default the
    op's name in CamelCase with `Backward0`. The node's class has that name too, as torch's
    (`type(t.grad_fn).__name__`).

    `jvps` holds the tangent rules, shaped like `vjps` (a tuple, or one callable taking the
    position first). `elementwise=True` says the Jacobian is diagonal: then J t and J^T g are
    the same product, and the gradient rules serve as the tangent rules.

    `joint=True` is for ops whose inputs' gradients share most of their work (a recurrence,
    where every gradient goes through the same backward pass over time): `vjps` is then one
    rule `vjp(needs, g, ans, *inputs, **params)` returning a gradient (or None) per input,
    `needs` saying which are wanted, and `jvps` one rule `jvp(tangents, ans, *inputs,
    **params)` returning the output's tangent from all inputs' tangents (None where absent).
    """

    def __init__(self, name, forward, vjps=None, jvps=None, saves="", view=False,
                 inplace_fast=None, elementwise=False, grad_fn_name=None, joint=False,
                 backward=None):
        self.name = name
        self.node_name = grad_fn_name or ("".join(p.capitalize() for p in name.split("_"))
                                          + "Backward0")
        # The node's class, made once when its name does not depend on the call.
        self.node_class = _class_named(self.node_name) if isinstance(self.node_name, str) \
            else None
        self.name_reads_inputs = (callable(grad_fn_name)
                                  and len(inspect.signature(grad_fn_name).parameters) == 2)
        if name in REGISTRY:
            raise ValueError(f"two ops are named {name!r}; op names must be unique")
        NUMPY.register(name, forward=forward, backward=backward, inplace=inplace_fast)
        self.vjps = vjps
        if elementwise and jvps is not None:
            raise ValueError(f"op {name}: elementwise ops take their gradient rules as tangent "
                             "rules; give jvps or elementwise=True, not both")
        self.jvps = vjps if elementwise else jvps
        self.joint = joint
        names = saves.split()
        self.saves_ans = "ans" in names
        if "*" in names:
            self.saved_positions = _EVERY_POSITION
        else:
            params = _input_names(vjps) if names else []
            unknown = set(names) - set(params) - {"ans"}
            if unknown:
                raise ValueError(f"op {name}: saves names {unknown} that are not inputs")
            self.saved_positions = frozenset(params.index(n) for n in names if n != "ans")
        self.view = view
        # Whether this op's own forward and fused_backward methods replace the backend's
        # kernels (autocast's float32 twins); ops read the backend's tables directly otherwise.
        self.kernels_overridden = False
        REGISTRY[name] = self


    def forward(self, *arrays, **params):
        """The selected backend's kernel for this op. (Autocast's float32 twin of an op
        replaces it with one that runs it on float32 copies.)"""
        return selected.backend.forwards[self.name](*arrays, **params)

    def fused_backward(self):
        """The selected backend's fused backward for this op, or None: the rules then run."""
        return selected.backend.backwards.get(self.name)

    def __call__(self, *args, **params):
        # Two flags read per call; the profiler's wrapping of `run` only while it records,
        # the precision handler's (autocast, 16-bit arithmetic) only once it is installed.
        if profiler.active is None:
            handler = precision.handler
            if handler is None:
                return run(self, args, params)
            return handler(self, args, params)
        return apply(self, args, params)

    def __repr__(self):
        return f"<op {self.name}>"


class _EveryPosition:
    """`saves="*"`: a variadic op (einsum) whose rules read all of its inputs."""

    def __contains__(self, position):
        return True


_EVERY_POSITION = _EveryPosition()


def _input_names(vjps):
    """Inputs are named by the rules' own parameters: `(g, ans, *inputs, **params)`."""
    rule = next(r for r in vjps if r is not None)
    return [p.name for p in inspect.signature(rule).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD][2:]


class _Precision:
    # ops/autocast.py's entry, set while autocast is on or once a half-precision dtype has
    # been used; ops pay one attribute check for it otherwise.
    handler = None


precision = _Precision()


def apply(op, args, params):
    if profiler.active is None:
        return _apply(op, args, params)
    return profiler.active.run(op.name, _apply, op, args, params)


def _apply(op, args, params):
    if precision.handler is not None:
        return precision.handler(op, args, params)
    return run(op, args, params)


def run(op, args, params):
    """The op on `args` as they are (the precision handler's casts already made)."""
    arrays = [a._array if isinstance(a, Tensor) else a for a in args]
    token = _np_errors.set(_IGNORE_ERRORS)
    try:
        if op.kernels_overridden:
            out = op.forward(*arrays, **params)
        else:
            out = selected.backend.forwards[op.name](*arrays, **params)
    finally:
        _np_errors.reset(token)
    kept = None
    if type(out) is tuple:
        out, kept = out
    if type(out) is not np.ndarray:
        out = np.asarray(out)
    # numpy's advanced indexing returns a copy that still has a base; only real views share.
    # numpy points a view's base at the array owning the memory, so identity answers first.
    if op.view and out.base is not None and (out.base is arrays[0] or out.base is arrays[0].base
                                             or np.may_share_memory(out, arrays[0])):
        result = args[0].alias(out)
    else:
        result = _wrap(out)
    if grad_mode._State.enabled:
        for a in args:
            if isinstance(a, Tensor) and a.requires_grad:  # a node, which sees which ones
                params = params or _NO_PARAMS
                node_class = op.node_class or _node_class(op, args, params)
                result.set_history(node_class(op, args, params, result, kept))
                break
    # After recording: a tangent rule reading `ans` then links the tangent to the graph.
    if _dual.level is not None:
        _push_tangent(op, args, params, result)
    return result


def _push_tangent(op, args, params, result):
    """Give `result` its tangent in the active dual level, if any input has one."""
    level = forward_ad.active_level()
    if level is None or not dtypes.is_differentiable(result.dtype):
        return
    tangents = [forward_ad.tangent_of(a, level) for a in args]
    if all(t is None for t in tangents):
        return
    if op.jvps is None:
        raise NotImplementedError(f"op {op.name} has no tangent rule, so it cannot be used on "
                                  "dual tensors (forward-mode AD)")
    with forward_ad.paused():
        tangent = _output_tangent(op, args, params, result, tangents)
    if tangent is not None:
        level.set(result, tangent)
        node = result.grad_fn
        if isinstance(node, OpNode) and node.ans is not None and type(node.ans[0]) is Tensor:
            # Backward through this node then sees a dual output (forward-over-reverse).
            level.set(node.ans[0], tangent)


def _output_tangent(op, args, params, result, tangents):
    jvps = op.jvps
    per_input = type(jvps) is tuple
    total = jvps(tangents, result, *args, **params) if op.joint else None
    for i, t in enumerate(() if op.joint else tangents):
        if t is None:
            continue
        if per_input:
            rule = jvps[i]
            ti = None if rule is None else rule(t, result, *args, **params)
        else:
            ti = jvps(i, t, result, *args, **params)
        if ti is not None:
            total = ti if total is None else total + ti
    if total is None:
        return None
    if total.shape != result.shape:
        # A broadcast tangent is a read-only view; an in-place op may write into this one.
        total = total.expand(result.shape).clone()
    if total.dtype != result.dtype:
        total = total.to(result.dtype)
    is_view = result._vc is getattr(args[0], "_vc", None)
    if not is_view and any(t is not None and np.may_share_memory(total._array, t._array)
                           for t in tangents):
        # Only a view's tangent may share an input tangent's storage (clone's rule is `t`).
        total = total.clone()
    return total


# Shared, never mutated: a node per op is the graph's cost in objects the garbage collector
# must walk, so the common empty parameters and the `needs` patterns (which args need a
# gradient, one tuple of bools per pattern) are not rebuilt each time.
_NO_PARAMS = {}
_NEEDS = {}


_NODE_CLASSES = {}
# torch's words for the two things an inference tensor may not do outside inference mode.
_INFERENCE_SAVED = ("Inference tensors cannot be saved for backward. To work around you can "
                    "make a clone to get a normal tensor and use it in autograd.")
_INFERENCE_INPLACE = ("Inplace update to inference tensor outside InferenceMode is not "
                      "allowed. You can make a clone to get a normal tensor before doing "
                      "inplace update.")


def _node_class(op, args, params):
    """The node's class for an op whose node name depends on the call (SumBackward0 or 1)."""
    name = op.node_name
    name = name(params, args) if op.name_reads_inputs else name(params)
    return _class_named(name)


def _class_named(name):
    node_class = _NODE_CLASSES.get(name)
    if node_class is None:
        node_class = _NODE_CLASSES[name] = type(name, (OpNode,), {"__slots__": ()})
    return node_class


def named(result, name, *inputs):
    """`result` with its node named `name`, torch's name for a result that mpigrad makes with
    a shared op (transpose as a permute) or several ops (a loss ending in a mean), where
    torch records a node of its own (TransposeBackward0, MseLossBackward0); `type(grad_fn)`
    and the profiler then say what torch's say. Only the node that made `result` from
    `inputs` just now is renamed, never one that an input already had (an op that returned
    its input unchanged)."""
    node = result.grad_fn
    if isinstance(node, OpNode):
        for x in inputs:
            if node is getattr(x, "grad_fn", None):
                return result
        node.__class__ = _class_named(name)
    return result


class OpNode(Node):
    __slots__ = ("op", "inputs", "params", "needs", "versions", "ans", "packed", "kept")
    # The rules build new arrays, or pass an incoming gradient through (which the engine sees).
    fresh_gradients = True

    def __init__(self, op, args, params, result, kept):
        state = grad_mode._State
        hooks = state.saved_tensors_hooks
        saved = op.saved_positions
        # One pass over the inputs for which need a gradient, their edges, what the rules
        # read and the versions. What the rules read is `args` itself until an input must be
        # replaced (by its Meta, or a packed SavedTensor): one object fewer per node for the
        # garbage collector.
        needs = []
        edges = []
        inputs = args
        versions = []
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                needs.append(False)
                edges.append(None)
                continue
            need = a.requires_grad
            needs.append(need)
            edges.append(gradient_edge(a) if need else None)
            if i in saved:
                if a._inference and not state.inference:
                    raise RuntimeError(_INFERENCE_SAVED)
                versions += (a._vc, a._vc[0], i)
                if hooks is None:
                    continue
                stand_in = SavedTensor(hooks, a, edges[i])
            else:
                stand_in = _meta(a._array)
            if inputs is args:
                inputs = list(args)
            inputs[i] = stand_in
        Node.__init__(self, tuple(edges))
        if op.view and result._vc is getattr(args[0], "_vc", None):
            # A view's node describes its base as it is now; an in-place change of the base
            # afterwards would make that history wrong, so backward must refuse it.
            versions += (result._vc, result._vc[0], 0)
        self.op = op
        self.params = params
        needs = tuple(needs)
        self.needs = _NEEDS.setdefault(needs, needs)
        self.inputs = inputs
        # Flat (counter, version it must still have, input position) triples: one tuple per
        # node, not one per saved input, for the garbage collector to walk.
        self.versions = tuple(versions)
        self.packed = hooks is not None
        self.ans = None
        self.kept = kept
        if op.saves_ans:
            self.rebind_output(result)

    def name(self):
        return type(self).__name__

    def rebind_output(self, tensor):
        """After an in-place op, the saved output is the modified tensor itself."""
        if self.op.saves_ans:
            hooks = grad_mode._State.saved_tensors_hooks if self.packed else None
            self.ans = (_saved_output(tensor) if hooks is None
                        else (SavedTensor(hooks, tensor, 0), tensor._version))

    def _stale(self, what, shape, dtype, version, expected):
        return RuntimeError(
            f"one of the tensors needed for gradient computation has been modified by an "
            f"in-place operation: {what} of {self.name()} (op '{self.op.name}', a {dtype} "
            f"tensor of shape {tuple(shape)}) is at version {version}; expected version "
            f"{expected}. Use an out-of-place op (x = x + y instead of x += y) or clone() "
            "the tensor before changing it.")

    def _check_current(self):
        """The inputs the rules read, after checking that backward may still run this node:
        not freed, and nothing it saved changed in place since."""
        # Read before checking: another thread's backward may release this node meanwhile,
        # and release() marks it freed before it drops anything.
        inputs = self.inputs
        if self._freed:
            self.check_not_freed()
        triples = iter(self.versions)
        for vc, expected, i in zip(triples, triples, triples):
            if vc[0] != expected:
                raise self._stale(f"input {i}", inputs[i].shape, inputs[i].dtype, vc[0], expected)
        return inputs

    @property
    def scatters(self):
        return self.op.name in selected.backend.scatters

    def scatter_into(self, g, target):
        """Add the input's gradient, from the output's gradient g, into `target` (the
        gradient backward holds for the input so far, a Tensor only it sees) in place with
        the op's scatter kernel; False when that does not apply (the rules then run)."""
        op = self.op
        kernel = None if op.kernels_overridden else selected.backend.scatters.get(op.name)
        if (kernel is None or self.packed or g.is_sparse or target.is_sparse
                or _dual.level is not None):
            return False
        like = self._check_current()[0]  # a Meta or a Tensor: its shape and dtype
        array = target._array
        if array.shape != like.shape or not array.dtype == g.dtype == like.dtype:
            return False
        kernel(array, g._array, **self.params)
        return True

    def apply(self, grad_outputs):
        saved_ans = self.ans
        inputs = self._check_current()
        ans = None
        if self.packed:
            inputs = [x.unpack(self) if type(x) is SavedTensor else x for x in inputs]
        if saved_ans is not None:
            saved, expected = saved_ans
            if saved._version != expected:
                raise self._stale("the output", saved.shape, saved.dtype, saved._version, expected)
            if type(saved) is SavedTensor:
                ans = saved.unpack(self)
            else:
                ans = saved.alias(view=False)
                ans.set_history(self)
            if _dual.level is not None:
                _copy_tangent(saved, ans)
        g = grad_outputs[0]
        params = self.params
        op = self.op
        if not grad_mode._State.enabled and _dual.level is None and not g.is_sparse:
            fused = (op.fused_backward() if op.kernels_overridden
                     else selected.backend.backwards.get(op.name))
            if fused is not None:
                return self._fused(fused, g, ans, inputs, params)
        vjps = op.vjps
        per_input = type(vjps) is tuple
        joint = vjps(self.needs, g, ans, *inputs, **params) if op.joint else None
        grads = []
        for i, need in enumerate(self.needs):
            if not need:
                grads.append(None)
                continue
            if joint is not None:
                gi = joint[i]
            elif per_input:
                rule = vjps[i]
                gi = None if rule is None else rule(g, ans, *inputs, **params)
            else:
                gi = vjps(i, g, ans, *inputs, **params)
            if gi is not None and not gi.is_sparse:  # a sparse one is built to fit
                like = inputs[i]
                array = gi._array
                if array.shape != like.shape or array.dtype != like.dtype:
                    gi = reduce_to(gi, like)
            grads.append(gi)
        return grads

    def _fused(self, kernel, g, ans, inputs, params):
        """The gradients from the backend's fused backward: arrays in, arrays out, no graph."""
        arrays = [x._array if isinstance(x, Tensor) else x for x in inputs]
        if self.kept is not None:
            params = {**params, "kept": self.kept}
        token = _np_errors.set(_IGNORE_ERRORS)  # silent, as the rules' ops are
        try:
            out = kernel(self.needs, g._array, None if ans is None else ans._array, *arrays,
                         **params)
        finally:
            _np_errors.reset(token)
        grads = []
        for need, gi, like in zip(self.needs, out, inputs):
            if not need or gi is None:
                grads.append(None)
                continue
            if type(gi) is not np.ndarray:  # numpy's 0-d arithmetic answers a scalar
                gi = np.asarray(gi)
            gi = Tensor.wrap(gi)
            if gi.shape != like.shape or gi.dtype != like.dtype:
                gi = reduce_to(gi, like)
            grads.append(gi)
        return grads

    def release(self):
        if self.op.saved_positions or self.op.saves_ans:
            self._freed = True
            self.inputs = None
            self.ans = None
            self.kept = None


_metas = {}


def _meta(array):
    """The Meta of an unsaved input: one shared object per shape and dtype."""
    key = (array.shape, array.dtype)
    meta = _metas.get(key)
    if meta is None:
        if len(_metas) > 4096:  # shapes that keep changing must not grow this forever
            _metas.clear()
        meta = _metas[key] = Meta(*key)
    return meta


def _saved_output(tensor):
    """The output as a rule may read it: an alias (no graph link, so no reference cycle through
    the node) and the version it must still have at backward."""
    alias = tensor.alias(view=False)
    if _dual.level is not None:
        _copy_tangent(tensor, alias)
    return alias, tensor._version


def _copy_tangent(tensor, alias):
    level = _dual.level
    tangent = level.get(tensor)
    if tangent is not None:
        level.set(alias, tangent)


def _check_inplace_allowed(target):
    if target.grad_fn is None and target.requires_grad:
        raise RuntimeError("a leaf tensor that requires grad is being used in an in-place "
                           "operation; do it under `with mpigrad.no_grad():` (as optimizers "
                           "do) or on a clone.")
    if target._base is not None:
        # The base would not learn of the new history, and its gradient would be lost.
        raise RuntimeError("an in-place operation that autograd must record cannot write into "
                           "a view (a slice, reshape, transpose or detach() of another "
                           "tensor); clone() the view, or build the result out of place.")


def inplace(op, target, *others, **params):
    """Run `op(target, *others)` and write the result into `target`'s storage.

    When the graph is being recorded, `target` is rebased onto the new node (as in torch); if
    the rule needs target's old value, that value is kept in a copy first. Under a dual level,
    the new tangent is written into target's tangent (see `_give_tangent`).
    """
    if target._inference and not grad_mode._State.inference:
        raise RuntimeError(_INFERENCE_INPLACE)
    record = grad_mode._State.enabled and (
        target.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in others))
    level = forward_ad.active_level() if _dual.level is not None else None
    dual = level is not None and any(forward_ad.tangent_of(t, level) is not None
                                     for t in (target,) + others)
    if not record and not dual:
        arrays = [o._array if isinstance(o, Tensor) else o for o in others]
        fast = selected.backend.inplace.get(op.name)
        token = _np_errors.set(_IGNORE_ERRORS)
        try:
            with target.writing() as data:
                if fast is not None:
                    fast(data, *arrays, **params)
                else:
                    np.copyto(data, op.forward(data, *arrays, **params), casting="same_kind")
        finally:
            _np_errors.reset(token)
        return target
    if record:
        _check_inplace_allowed(target)
    source = target
    if record and 0 in op.saved_positions:
        source = Tensor.wrap(target._array.copy())
        if target.grad_fn is not None:
            source.set_history(target.grad_fn, target._output_nr)
        if dual and level.get(target) is not None:
            level.set(source, level.get(target))
    result = apply(op, (source,) + others, params)
    if result.shape != target.shape:
        raise RuntimeError(f"in-place {op.name}: the result's shape {tuple(result.shape)} "
                           f"doesn't match the tensor's shape {tuple(target.shape)}")
    with target.writing() as data:
        np.copyto(data, result._array, casting="same_kind")
    if dual:
        _give_tangent(level, target, level.get(result))
    if record:
        target.set_history(result.grad_fn)
        result.grad_fn.rebind_output(target)
    return target


def _give_tangent(level, target, tangent):
    """After an in-place op: write the new tangent where target's tangent lives, so views
    sharing it see the change, as in torch. A view without a tangent gets one inside its
    base's (a zero one, if the base had none)."""
    if tangent is None:
        return
    old = level.get(target)
    base = target._base
    if old is None and base is not None:
        base_tangent = level.get(base)
        if base_tangent is None:
            base_tangent = Tensor.wrap(np.zeros_like(base._array))
        old = forward_ad.view_tangent_in_base(target, base, base_tangent)
        if old is not None:
            level.set(base, base_tangent)
            level.set(target, old)
    if (old is None or not old._array.flags.writeable
            or (grad_mode._State.enabled and (old.requires_grad or tangent.requires_grad))):
        # A recorded tangent is replaced rather than overwritten, so its graph stays right.
        level.set(target, tangent)
        return
    with old.writing() as data:
        np.copyto(data, tangent._array, casting="same_kind")
