"""Forward-mode AD (torch.autograd.forward_ad): dual tensors carry a tangent through every op.

Where tangents live: in the dual level, not in the tensors. `enter_dual_level()` makes the
level; `make_dual(x, t)` returns a new tensor on x's storage whose tangent `t` the level holds,
keyed by the tensor's identity (with a weak reference, so a dual tensor that dies drops its
tangent at once). Every op that finds a tangent on one of its inputs computes its output's
tangent with its tangent rule (in `ops/`, beside the gradient rule) and stores it in the
level. `exit_dual_level()` drops the level and every tangent in it; the tensors themselves
never change. When no level is active, an op pays one attribute check.

As in torch today, levels do not nest: one level at a time, index 0. The level is global (a
dual tensor made on one thread is dual on every thread) while whether ops propagate tangents
is per thread: the rules run with propagation off, so a rule's own ops see plain primals.

Views and in-place ops behave as in torch: a view of a dual tensor has as tangent the same
view of its tangent (so they share storage), an in-place op on a dual tensor writes the new
tangent into its tangent's storage (its views see it), and an in-place op that gives a tangent
to a view of a tensor with none gives the base a zero tangent that the view's is a view of.
Both directions of composing with reverse mode work: a tangent is an ordinary tensor whose
gradient backward computes (reverse-over-forward), and backward through dual tensors gives
dual gradients (forward-over-reverse: the gradient rules' ops propagate tangents like any
other ops, the tensors a node saved keep theirs). Differences from torch: a view made before
its base became dual does not see the base's tangent later, and a `.grad` accumulated in
place a second time under a level keeps only its first tangent.
"""
import collections
import contextlib
import functools
import threading
import weakref

import numpy as np

from .. import dtypes
from ..tensor import Tensor
from . import engine, grad_mode
from .graph import Node, gradient_edge

__all__ = ["dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual",
           "UnpackedDualTensor"]

UnpackedDualTensor = collections.namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Level:
    """One dual level: the tangent of every dual tensor, by the tensor's id."""

    __slots__ = ("index", "tangents")

    def __init__(self, index):
        self.index = index
        self.tangents = {}

    def get(self, tensor):
        entry = self.tangents.get(id(tensor))
        return None if entry is None else entry[1]

    def set(self, tensor, tangent):
        key = id(tensor)
        tangents = self.tangents

        def forget(ref):
            # The id may already belong to a newer tensor's entry; only drop our own.
            if tangents.get(key, (None,))[0] is ref:
                del tangents[key]
        tangents[key] = (weakref.ref(tensor, forget), tangent)


class _Global:
    # The active level, or None: the one attribute an op reads when forward AD is off.
    level = None
    lock = threading.Lock()


class _ThreadState(threading.local):
    # False while a tangent rule (or a custom Function's forward or jvp) runs on this thread.
    propagating = True


_global = _Global
engine.dual_state = _global
_thread = _ThreadState()


def active_level():
    """The level whose tangents ops on this thread propagate, or None."""
    level = _global.level
    return level if level is not None and _thread.propagating else None


@contextlib.contextmanager
def paused():
    """No tangent propagation on this thread: tangent rules, a custom Function's forward and
    jvp, and backward run this way, so their ops compute with the primals alone."""
    previous = _thread.propagating
    _thread.propagating = False
    try:
        yield
    finally:
        _thread.propagating = previous


def tangent_of(tensor, level):
    return level.get(tensor) if isinstance(tensor, Tensor) else None


def enter_dual_level():
    """Start a new dual level and return its index. Only one level may be active."""
    with _global.lock:
        if _global.level is not None:
            raise RuntimeError("Nested forward mode AD is not supported at the moment: a dual "
                               "level is already active; exit it before entering another")
        _global.level = _Level(0)
        return 0


def exit_dual_level(*, level=None):
    """End the active dual level, dropping every tangent it holds."""
    with _global.lock:
        current = _global.level
        if current is None:
            raise RuntimeError("exit_dual_level: no dual level is active (enter one with "
                               "enter_dual_level() or `with dual_level():`)")
        if level is not None and level != current.index:
            raise RuntimeError("Trying to exit a forward AD level that was not the last one "
                               f"that was created (asked for level {level}, the active one is "
                               f"{current.index}). This is not supported.")
        _global.level = None
        current.tangents.clear()


class dual_level:
    """`with dual_level():` the block in which dual tensors exist (also a decorator)."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with dual_level():
                return fn(*args, **kwargs)
        return wrapper


def _level_for(level):
    current = _global.level
    if level is None:
        level = -1 if current is None else current.index
    if current is None or level != current.index:
        return None
    return current


def make_dual(tensor, tangent, *, level=None):
    """A view of `tensor` whose tangent is `tangent` (used as is, not copied) in the level.

    Differentiable in reverse mode too: gradients flow from the result to `tensor`, and from
    anything computed from the tangent (`unpack_dual(...).tangent`) to `tangent`.
    """
    current = _level_for(level)
    if current is None:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, "
                           "make sure to enter_dual_level() first (or make it inside "
                           "`with forward_ad.dual_level():`)")
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError(f"make_dual expects two tensors, got {type(tensor).__name__} and "
                        f"{type(tangent).__name__}")
    for what, t in (("primal", tensor), ("tangent", tangent)):
        if not dtypes.is_differentiable(t.dtype):
            raise ValueError(f"Expected {what} to be floating point or complex, but got: "
                             f"{t.dtype}")
    if tangent.shape != tensor.shape:
        raise RuntimeError(f"make_dual: the tangent has shape {tuple(tangent.shape)} but the "
                           f"primal has shape {tuple(tensor.shape)}; they must match")
    if tangent.dtype != tensor.dtype:
        raise RuntimeError(f"make_dual: the tangent is {tangent.dtype} but the primal is "
                           f"{tensor.dtype}; convert the tangent with .to({tensor.dtype})")
    if current.get(tensor) is not None:
        raise RuntimeError("Making a dual Tensor based on a Tensor that already has a forward "
                           f"gradient at the same level {current.index} is not supported.")
    dual = _differentiable_alias(tensor)
    current.set(dual, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent): a view of `tensor` without tangent, and its tangent (None if it has
    none, or outside a dual level)."""
    current = _level_for(level)
    if current is None or not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    tangent = current.get(tensor)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    return UnpackedDualTensor(_differentiable_alias(tensor), tangent)


class _AliasBackward(Node):
    """The reverse-mode link of make_dual's and unpack_dual's views: the identity."""

    __slots__ = ()
    fresh_gradients = True

    def name(self):
        return "AliasBackward"

    def apply(self, grad_outputs):
        return [grad_outputs[0]]


def _differentiable_alias(tensor):
    """A view of `tensor` that no level knows (so no tangent) and that backward links to it."""
    view = tensor.alias()
    if grad_mode.is_grad_enabled() and tensor.requires_grad:
        view.set_history(_AliasBackward((gradient_edge(tensor),)))
    return view


def view_tangent_in_base(view, base, base_tangent):
    """The part of `base_tangent` (laid out as `base`) that `view` is of `base`, or None when
    the layouts do not allow it (then the view's tangent stays its own)."""
    array, tangent = base._array, base_tangent._array
    if not (array.flags.c_contiguous and tangent.flags.c_contiguous
            and tangent.shape == array.shape and tangent.dtype == array.dtype
            and view.dtype == array.dtype):
        return None
    offset = (view._array.__array_interface__["data"][0]
              - array.__array_interface__["data"][0])
    if offset < 0 or offset % array.itemsize:
        return None
    start = tangent.reshape(-1)[offset // array.itemsize:]
    return base_tangent.alias(np.lib.stride_tricks.as_strided(
        start, view.shape, view._array.strides, writeable=True), view=False)
