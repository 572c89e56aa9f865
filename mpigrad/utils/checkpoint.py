"""Activation checkpointing: keep a segment's inputs, recompute its activations in backward.

The default (`use_reentrant=False`) records the segment's graph as usual but, through
saved-tensor hooks, keeps none of the tensors its ops save: each is replaced by its position
in the order of saving. The first time backward needs one of them, the segment runs again
from its inputs (with the random state it first ran with), the tensors it saves are captured
in the same order, and each is handed out once and dropped, so at most one segment's
activations are alive at a time. The graph itself is the ordinary one, so parameters inside
get their gradients whether or not the inputs require grad, `autograd.grad` touches no
`.grad`, and DDP sees each parameter's gradient once.

`use_reentrant=True` is the older scheme, kept for compatibility: the segment runs without a
graph, and a custom Function's backward reruns it and calls backward inside backward. Its
limits are torch's: parameters get no gradient when no input requires grad (it warns), and
it cannot serve `autograd.grad` or `backward(inputs=...)`.
"""
import warnings

from .. import random
from ..autograd import Function, backward, grad_mode
from ..autograd.engine import current_task, queue_callback
from ..autograd.graph import saved_tensors_hooks
from ..tensor import Tensor


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """`function(*args, **kwargs)` without keeping its activations; backward recomputes them.

    `use_reentrant=None` means False (torch 2.13 warns and still defaults to True).
    """
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs) + " (only "
                             "checkpoint(use_reentrant=False) passes keyword arguments on)")
        if grad_mode.is_grad_enabled() and not any(
                isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None "
                          "(use_reentrant=False gives parameters their gradients)",
                          stacklevel=2)
        return _ReentrantCheckpoint.apply(function, preserve_rng_state, *args)
    segment = _Segment(function, args, kwargs, preserve_rng_state)
    with saved_tensors_hooks(segment.pack, segment.unpack):
        return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None,
                          preserve_rng_state=True):
    """Run `functions` (a Sequential or a list of callables) in order, checkpointing all but
    the last of `segments` equal runs of them (as torch does: the last one's activations are
    needed at once by backward anyway)."""
    functions = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if not 0 < segments <= len(functions):
        raise ValueError(f"checkpoint_sequential: segments must be between 1 and the number of "
                         f"functions ({len(functions)}), got {segments}")
    size = len(functions) // segments

    def run(part):
        def forward(x):
            for f in part:
                x = f(x)
            return x
        return forward

    start = 0
    for _ in range(segments - 1):
        input = checkpoint(run(functions[start:start + size]), input,
                           use_reentrant=use_reentrant, preserve_rng_state=preserve_rng_state)
        start += size
    return run(functions[start:])(input)


class CheckpointError(RuntimeError):
    pass


class _StopRecomputation(Exception):
    """Raised from the recording hook once every saved tensor is back: the rest of the segment
    need not run again."""


class _Segment:
    """One checkpointed call: its inputs, its random state, and what backward recomputed.

    The graph's nodes hold `unpack` (and so this object, and the inputs) through their saved
    placeholders; nothing here holds the nodes.
    """

    def __init__(self, function, args, kwargs, preserve_rng_state):
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.rng_state = random.get_rng_state() if preserve_rng_state else None
        self.input_versions = [(a, a._version) for a in (*args, *kwargs.values())
                               if isinstance(a, Tensor)]
        self.saved_meta = []  # (shape, dtype) of each saved tensor, in the order of saving
        self.recomputed = {}  # backward pass id -> arrays not yet handed out

    def pack(self, tensor):
        self.saved_meta.append((tensor.shape, tensor.dtype))
        return len(self.saved_meta) - 1

    def unpack(self, index):
        task = current_task()
        key = task.id if task is not None else None
        arrays = self.recomputed.get(key)
        if arrays is None:
            arrays = self.recomputed[key] = self._recompute()
            if task is not None:
                # Dropped when the pass ends, however it ends.
                queue_callback(lambda: self.recomputed.pop(key, None),
                               on_error=lambda error: self.recomputed.pop(key, None))
        array = arrays[index]
        if array is None:
            raise CheckpointError(
                "checkpoint: a tensor saved inside the checkpointed function is being unpacked "
                "a second time in one backward pass (a custom Function reading ctx."
                "saved_tensors twice?); read it once and keep the result.")
        arrays[index] = None  # handed out: backward frees it as soon as it is done with it
        return Tensor.wrap(array)

    def _recompute(self):
        for tensor, version in self.input_versions:
            if tensor._version != version:
                raise CheckpointError(
                    "checkpoint: an input of the checkpointed function was modified in place "
                    "after the forward pass, so its activations cannot be recomputed; clone it "
                    "before changing it.")
        arrays = []
        wanted = len(self.saved_meta)

        def record(tensor):
            arrays.append(tensor._array)
            if len(arrays) == wanted:
                raise _StopRecomputation

        outer_rng = random.get_rng_state() if self.rng_state is not None else None
        if outer_rng is not None:
            random.set_rng_state(self.rng_state)
        try:
            with grad_mode.enable_grad(), saved_tensors_hooks(record, _not_for_backward):
                self.function(*self.args, **self.kwargs)
        except _StopRecomputation:
            pass
        finally:
            if outer_rng is not None:
                random.set_rng_state(outer_rng)
        got = [(a.shape, a.dtype) for a in arrays]
        if got != self.saved_meta:
            raise CheckpointError(
                f"checkpoint: the recomputation saved {len(got)} tensors but the forward pass "
                f"saved {wanted}, or their shapes or dtypes differ (first difference at "
                f"{_first_difference(got, self.saved_meta)}). The checkpointed function must "
                "do the same operations each time it runs (same requires_grad on its inputs and "
                "parameters, no branches on global state).")
        return arrays


def _not_for_backward(index):
    raise AssertionError("the graph built by a checkpoint's recomputation is never "
                         "differentiated")


def _first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class _ReentrantCheckpoint(Function):
    @staticmethod
    def forward(ctx, run, preserve_rng_state, *args):
        ctx.run = run
        ctx.rng_state = random.get_rng_state() if preserve_rng_state else None
        ctx.tensor_positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.args = [None if isinstance(a, Tensor) else a for a in args]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        return run(*args)

    @staticmethod
    def backward(ctx, *grad_outputs):
        task = current_task()
        if task is not None and not task.accumulate:
            raise RuntimeError(
                "When use_reentrant=True, checkpoint is incompatible with .grad() or passing an "
                "`inputs` parameter to .backward(). To resolve this error, you can either set "
                "use_reentrant=False, or call .backward() without passing the `inputs` "
                "argument.")
        args = list(ctx.args)
        saved = ctx.saved_tensors
        for pos, t in zip(ctx.tensor_positions, saved):
            args[pos] = t.detach().requires_grad_(t.requires_grad)
        if ctx.rng_state is not None:
            outer_state = random.get_rng_state()
            random.set_rng_state(ctx.rng_state)
        try:
            with grad_mode.enable_grad():
                outputs = ctx.run(*args)
        finally:
            if ctx.rng_state is not None:
                random.set_rng_state(outer_state)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs)
                 if isinstance(o, Tensor) and o.requires_grad]
        if pairs:
            # Parameters used inside the segment receive their .grad here, like any leaf.
            backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in args)
