"""Activation checkpointing: keep a segment's inputs, recompute its activations in backward.

The forward runs without recording a graph, so the segment's intermediate activations are
freed at once; backward reruns the segment with the same random state and differentiates it.
"""
from .. import random
from ..autograd import Function, backward, grad_mode
from ..tensor import Tensor


class _Checkpoint(Function):
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


def checkpoint(function, *args, preserve_rng_state=True):
    """`function(*args)` without keeping its activations; they are recomputed in backward."""
    return _Checkpoint.apply(function, preserve_rng_state, *args)
