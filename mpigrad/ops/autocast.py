"""Autocast and 16-bit arithmetic as torch's CPU path does them, at the one place ops run.

Two rules, applied by `_handle` at every op's entry once it is installed (ops pay nothing
before: core.py checks one attribute):

- **Autocast** (while `mpigrad.autocast` is on, in the forward only): the op's inputs are cast
  by the op's policy in torch 2.13's AutocastCPU lists: matrix products and convolutions run in
  the autocast dtype, losses in float32, `cat`/`stack` in the widest input dtype; every other
  op runs in the dtypes it is given.
- **16-bit compute**: an op with a float16 or bfloat16 input runs on float32 copies of those
  inputs and its floating result is rounded once to torch's result dtype, as torch's CPU
  kernels do (so a bf16 matmul is the float32 product of bf16 values, rounded to bf16). Its
  gradient rules likewise run in float32 on the saved 16-bit values and round once (see
  `_float32_twin`). Ops that only move data run on the 16-bit arrays themselves.
"""
import copy
import functools
import threading

import numpy as np

from .. import dtypes
from ..autograd import engine, grad_mode
from ..tensor import Tensor
from . import core
from .arithmetic import cast

# Op names of mpigrad's rules. torch's list names aten ops: mm, bmm, addmm, baddbmm and
# linalg_vecdot are mpigrad's matmul and einsum; conv1d/3d run through conv2d; LSTM and the
# plain RNNs run in the lower dtype on torch's CPU (GRU does not).
LOWER_PRECISION = frozenset({"matmul", "linear", "einsum", "conv2d", "conv_transpose2d",
                             "lstm", "rnn_tanh", "rnn_relu"})
# The losses in torch's fp32 list are composites here; nn/functional/loss.py marks their entry
# with `float32_policy`. These are the ones that are single ops.
FLOAT32 = frozenset({"binary_cross_entropy", "mse_loss"})
PROMOTE = frozenset({"cat", "stack"})
# Ops whose forward refuses operands of different dtypes (as torch's do): run as given, so
# that it does, rather than on float32 copies that would agree.
SAME_DTYPE = frozenset({"linear"})
# Exact in any dtype, and numpy runs them on ml_dtypes' arrays.
MOVES_DATA = frozenset({"cast", "clone", "copy", "fill", "getitem", "embedding", "index_put",
                        "pad", "flip",
                        "roll", "tril", "triu", "masked_fill", "take_along_dim"})


class _State(threading.local):
    # The autocast dtype while autocast is enabled on this thread, else None (torch's autocast
    # state is per thread too).
    dtype = None
    # Autocast regions entered and not left, and whether they cache casts.
    nesting = 0
    cache_enabled = True
    # As torch: inside autocast, a float32 leaf that requires grad (a weight) is cast to the
    # autocast dtype once, and every use shares that cast (so their gradients meet in the
    # 16-bit dtype before reaching the weight, as in torch). id -> (weight, its cast); emptied
    # when the outermost region is left.
    cache = None


state = _State()


def _install():
    core.precision.handler = _handle


def enable(dtype, cache_enabled=None):
    """Enter an autocast region (dtype, or None for one with autocast off); returns what to
    hand `restore` on leaving."""
    previous = (state.dtype, state.cache_enabled)
    state.dtype = dtype
    if cache_enabled is not None:
        state.cache_enabled = cache_enabled
    state.nesting += 1
    if dtype is not None:
        _install()
    return previous


def restore(previous):
    state.dtype, state.cache_enabled = previous
    state.nesting -= 1
    if state.nesting == 0:
        state.cache = None


dtypes._on_first_half_precision.append(_install)


def _handle(op, args, params):
    target = state.dtype
    if target is None:
        # Autocast is off, so only an op on a 16-bit tensor is handled: this handler stays
        # installed once a 16-bit dtype has been used, and float32 ops pass here.
        for a in args:
            if isinstance(a, Tensor) and a._array.dtype in dtypes.HALF_PRECISION:
                break
        else:
            return core.run(op, args, params)
    elif engine.current_task() is None:
        name = op.name
        if name in LOWER_PRECISION:
            args = _cast_eligible(args, target)
        elif name in FLOAT32:
            args = _cast_eligible(args, dtypes.float32)
        elif name in PROMOTE:
            args = _cast_eligible(args, _widest(args, target))
    if op.view or op.name in MOVES_DATA:
        return core.run(op, args, params)
    found = {a._array.dtype for a in args if isinstance(a, Tensor)}
    if found.isdisjoint(dtypes.HALF_PRECISION) or (op.name in SAME_DTYPE and len(found) > 1):
        return core.run(op, args, params)
    return core.run(_float32_twin(op), args, params)


def _eligible(a):
    # torch's autocast leaves float64 alone, as it does integer tensors.
    return (isinstance(a, Tensor) and dtypes.is_floating_point(a._array.dtype)
            and a._array.dtype != dtypes.float64)


def _cast_eligible(args, dtype):
    return tuple(_autocast_cast(a, dtype) if _eligible(a) and a._array.dtype != dtype else a
                 for a in args)


def _autocast_cast(a, dtype):
    cacheable = (state.cache_enabled and dtype == state.dtype and a._array.dtype == dtypes.float32
                 and a.requires_grad and a.grad_fn is None and a._base is None
                 and grad_mode._State.enabled)
    if not cacheable:
        return cast(a, dtype)
    if state.cache is None:
        state.cache = {}
    hit = state.cache.get(id(a))
    if hit is None or hit[0] is not a:
        hit = state.cache[id(a)] = (a, cast(a, dtype))
    return hit[1]


def _widest(args, target):
    found = {a._array.dtype for a in args if _eligible(a)}
    return target if found <= {target} else dtypes.float32


_twins = {}


def _float32_twin(op):
    """`op` as torch's CPU kernels run it on 16-bit tensors: the forward on float32 copies,
    its result rounded once to torch's result dtype; the gradient and tangent rules on float32
    copies of what they read, their results rounded once where the engine brings a gradient
    to its input's dtype. The node records the 16-bit inputs and output, as torch saves them,
    and keeps the op's name (MmBackward0)."""
    twin = _twins.get(op)
    if twin is None:
        twin = _twins[op] = copy.copy(op)
        twin.kernels_overridden = True
        twin.forward = _forward_in_float32(op.forward)
        # The compiled backward kernels take float32 and float64 arrays: 16-bit gradients
        # come from the rules on float32 copies.
        twin.fused_backward = _no_fused_backward
        twin.vjps = _rules_in_float32(op.vjps)
        twin.jvps = _rules_in_float32(op.jvps)
    return twin


def _no_fused_backward():
    return None


def _forward_in_float32(forward):
    @functools.wraps(forward)
    def run(*arrays, **params):
        result_dtype = _result_dtype(arrays)
        out = forward(*[a.astype(np.float32)
                        if isinstance(a, np.ndarray) and a.dtype in dtypes.HALF_PRECISION else a
                        for a in arrays], **params)
        if type(out) is tuple:  # (out, kept): the twin runs no fused backward to use kept
            out = out[0]
        if (result_dtype is not None and isinstance(out, (np.ndarray, np.generic))
                and dtypes.is_floating_point(out.dtype) and out.dtype != result_dtype):
            out = np.asarray(out).astype(result_dtype)
        return out
    return run


def _rules_in_float32(rules):
    if rules is None:
        return None
    if isinstance(rules, tuple):
        return tuple(None if rule is None else _rule_in_float32(rule) for rule in rules)
    return _rule_in_float32(rules)


def _rule_in_float32(rule):
    @functools.wraps(rule)
    def run(*args, **params):
        return rule(*[_to_float32(a) if isinstance(a, Tensor) else a for a in args], **params)
    return run


def _result_dtype(arrays):
    """torch's floating result dtype when it is a 16-bit one, else None (numpy's promotion of
    the float32 copies then gives torch's answer). As in torch, a 0-dim tensor takes part only
    when no tensor with dimensions is floating."""
    floating = [a for a in arrays
                if isinstance(a, np.ndarray) and dtypes.is_floating_point(a.dtype)]
    found = {a.dtype for a in floating if a.ndim > 0} or {a.dtype for a in floating}
    if len(found) == 1:
        (only,) = found
        return only if only in dtypes.HALF_PRECISION else None
    return None


def _map_tensors(change, args, kwargs):
    return (tuple(change(a) if isinstance(a, Tensor) else a for a in args),
            {k: change(v) if isinstance(v, Tensor) else v for k, v in kwargs.items()})


def _to_float32(a):
    return cast(a, dtypes.float32) if a._array.dtype in dtypes.HALF_PRECISION else a


def float32_policy(*tensors):
    """The start of a composite on torch's fp32 autocast list (the losses): under autocast,
    its 16-bit tensor arguments in float32 (a call, not a decorator, so that the warnings
    the loss gives still point at its caller)."""
    if state.dtype is None:
        return tensors
    return tuple(_to_float32(t) if isinstance(t, Tensor) else t for t in tensors)


def fused(lower_precision=False):
    """Marks a composite that torch runs as one kernel (layer norm, attention, gelu): on a
    16-bit input it runs on float32 copies, with autocast off inside, and its result is
    rounded once to the input's dtype, rather than after each op inside. With
    `lower_precision`, it is on torch's lower-precision autocast list too."""
    def decorate(function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            if core.precision.handler is None:
                return function(*args, **kwargs)
            if lower_precision and state.dtype is not None and engine.current_task() is None:
                target = state.dtype
                args, kwargs = _map_tensors(
                    lambda a: (_autocast_cast(a, target) if _eligible(a) and a._array.dtype != target
                               else a), args, kwargs)
            dtype = args[0]._array.dtype if args and isinstance(args[0], Tensor) else None
            if dtype not in dtypes.HALF_PRECISION:
                return function(*args, **kwargs)
            args, kwargs = _map_tensors(_to_float32, args, kwargs)
            previous = enable(None)
            try:
                out = function(*args, **kwargs)
            finally:
                restore(previous)
            return cast(out, dtype) if isinstance(out, Tensor) and out.dtype != dtype else out
        return run
    return decorate
