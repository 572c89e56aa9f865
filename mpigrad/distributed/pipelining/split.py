"""`pipeline(module, mb_args, split_spec)`: a model cut into stages at module boundaries.

torch traces the model (torch.export) and may cut its graph anywhere; mpigrad cuts only
between modules. The model must be a chain: an nn.Sequential, or a module whose forward
calls its children one after the other in the order they were registered, each on the
previous one's output (a child that is an nn.Sequential or nn.ModuleList is a chain of its
own children, and is opened when a split point names one of them). `pipeline` runs `mb_args`
through the module and through the chain and refuses the split (ValueError) if they differ:
a forward that is not such a chain cannot be cut here.
"""
import enum

import numpy as np

from ...autograd.grad_mode import no_grad
from ...nn import Module, ModuleList, Sequential
from ...tensor import Tensor
from .stage import PipelineStage

__all__ = ["SplitPoint", "pipeline", "Pipe"]


class SplitPoint(enum.Enum):
    """Where a named module cuts the chain: before it (BEGINNING) or after it (END)."""
    BEGINNING = 1
    END = 2


class Pipe:
    """The stages `pipeline` made: `num_stages`, `get_stage_module(i)` (an nn.Module whose
    state dict keys are the original model's), `build_stage(i, device, group)`."""

    def __init__(self, stage_modules):
        self._stage_modules = stage_modules
        self.num_stages = len(stage_modules)

    def get_stage_module(self, stage_index):
        if not 0 <= stage_index < self.num_stages:
            raise ValueError(f"stage_index {stage_index} is not in [0, {self.num_stages})")
        return self._stage_modules[stage_index]

    def build_stage(self, stage_index, device=None, group=None):
        return PipelineStage(self.get_stage_module(stage_index), stage_index, self.num_stages,
                             device, group=group)


def pipeline(module, mb_args, mb_kwargs=None, split_spec=None, split_policy=None):
    """Cut `module` into stages at the modules `split_spec` names ({qualified name:
    SplitPoint}; none: one stage); `mb_args` is one micro-batch of inputs, used to check the
    cut."""
    if split_policy is not None:
        raise NotImplementedError("pipeline(split_policy=...): name the split points in "
                                  "split_spec")
    if not isinstance(module, Module):
        raise TypeError(f"pipeline: module must be an nn.Module, got {type(module).__name__}")
    split_spec = {} if split_spec is None else split_spec
    if not isinstance(split_spec, dict):
        raise TypeError("pipeline: split_spec must be a dict naming the modules to cut at, "
                        "e.g. {'layers.2': SplitPoint.BEGINNING}")
    args = mb_args if isinstance(mb_args, tuple) else (mb_args,)
    kwargs = dict(mb_kwargs or {})
    chain = _chain(module, "", set(split_spec))
    names = [name for name, _ in chain]
    cuts = set()
    for name, point in split_spec.items():
        if not isinstance(point, SplitPoint):
            raise TypeError(f"pipeline: split_spec[{name!r}] must be a SplitPoint, got "
                            f"{point!r}")
        if name not in names:
            raise ValueError(f"pipeline: {name!r} is not a module of the chain "
                             f"{module.__class__.__name__} runs; split points can name {names}")
        cuts.add(names.index(name) + (point is SplitPoint.END))
    if cuts & {0, len(chain)}:
        raise ValueError(f"pipeline: split points {split_spec} leave an empty first or last "
                         "stage")
    bounds = [0, *sorted(cuts), len(chain)]
    stages = [_StageModule(chain[start:stop]) for start, stop in zip(bounds, bounds[1:])]
    _check_chain(module, stages, args, kwargs)
    return Pipe(stages)


def _chain(module, prefix, split_names):
    """[(qualified name, module)] that `module`'s forward runs in order, children opened
    where a split point is inside them."""
    chain = []
    for name, child in module.named_children():
        qualified = f"{prefix}{name}"
        opens = any(split.startswith(qualified + ".") for split in split_names)
        if opens or isinstance(child, ModuleList):
            chain += _chain(child, qualified + ".", split_names)
        else:
            chain.append((qualified, child))
    return chain


class _StageModule(Module):
    """Runs its part of the chain in order; its modules sit at their original qualified
    names, so its state dict's keys are the original model's."""

    def __init__(self, chain):
        super().__init__()
        self._order = [name for name, _ in chain]
        for name, child in chain:
            holder = self
            *parents, leaf = name.split(".")
            for parent in parents:
                if parent not in holder._modules:
                    holder.add_module(parent, Module())
                holder = holder._modules[parent]
            holder.add_module(leaf, child)

    def forward(self, *args, **kwargs):
        for name in self._order:
            holder = self
            for part in name.split("."):
                holder = holder._modules[part]
            out = holder(*args, **kwargs)
            args, kwargs = (out,), {}
        return out


def _check_chain(module, stages, args, kwargs):
    # In eval mode, so that dropout draws nothing (both runs must agree) and normalisation
    # updates no statistics; every module's own mode is restored after.
    modes = [(each, each.training) for each in module.modules()]
    module.eval()
    try:
        _compare_chain(module, stages, args, kwargs)
    finally:
        for each, training in modes:
            each.training = training


def _compare_chain(module, stages, args, kwargs):
    with no_grad():
        expected = module(*args, **kwargs)
        out, given = None, (args, kwargs)
        for stage in stages:
            out = stage(*given[0], **given[1])
            given = ((out,), {})
    if not (isinstance(expected, Tensor) and isinstance(out, Tensor)
            and expected.shape == out.shape
            and np.allclose(expected._array, out._array, rtol=1e-6, atol=1e-6, equal_nan=True)):
        raise ValueError(f"pipeline: {module.__class__.__name__}'s forward is not the chain of "
                         "its children (its output differs from running them one after the "
                         "other), so it cannot be cut at module boundaries; make it an "
                         "nn.Sequential or a forward that calls its children in order")
