"""The Optimizer base class: parameter groups, per-parameter state, state dicts."""

import copy
from collections import defaultdict

import numpy as np

from ..autograd.grad_mode import enable_grad
from ..autograd.profiler import record_function
from ..tensor import Tensor, zero_grads

__all__ = ["Optimizer"]


class Optimizer:
    """Base class of all optimizers, with torch.optim.Optimizer's interface.

    `params` is an iterable of Tensors, or of dicts ("parameter groups")
    each holding `'params'` and any hyper-parameters that override
    `defaults` for that group. `state` maps each parameter to a dict of
    its buffers (Tensors shaped like the parameter) and counters.

    A subclass sets its hyper-parameter names in `defaults`, checks them in
    `_check_hyperparameters` and updates one parameter in
    `_update`, writing into `param._array` in place: the arrays are
    never rebound, because DistributedDataParallel and views hold references
    to parameter storage. `step` runs `_update` inside `param.writing()`, so
    the parameter is marked written without the subclass having to remember.
    """

    def __init_subclass__(cls, **kwargs):
        # Every optimizer's step is one profiler row named as torch names it, whether the
        # subclass keeps the inherited step or brings its own. An inherited step is
        # unwrapped first, so a subclass of a subclass is not counted twice; only our own
        # wrapper is taken off, never the subclass's decorators (`@no_grad()` also sets
        # __wrapped__, and dropping it ran the step with grad enabled).
        super().__init_subclass__(**kwargs)
        step = getattr(cls.step, "_unprofiled", cls.step)
        cls.step = record_function(f"Optimizer.step#{cls.__name__}.step")(step)
        cls.step._unprofiled = step

    def __init__(self, params, defaults):
        self._check_hyperparameters(defaults)
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got a Tensor")
        param_groups = list(params)
        if not param_groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __repr__(self):
        groups = ["\n".join([f"Parameter Group {i}"]
                            + [f"    {key}: {group[key]}" for key in sorted(group)
                               if key != "params"])
                  for i, group in enumerate(self.param_groups)]
        # torch's layout: a blank line between groups.
        return f"{type(self).__name__} (\n" + "\n\n".join(groups) + "\n)"

    def add_param_group(self, param_group):
        """Add a group of parameters, e.g. layers unfrozen while fine-tuning.

        Hyper-parameters the group leaves out are taken from `defaults`.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError("a parameter group needs its parameters under the key 'params'")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        params = list(params)
        for param in params:
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                f"{type(param).__name__}")
            if not param.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        seen = {id(p) for group in self.param_groups for p in group["params"]}
        for i, param in enumerate(params):
            if id(param) in seen:
                raise ValueError(f"parameter {i} of parameter group {len(self.param_groups)} "
                                 "appears twice (in this group or an earlier one); give the "
                                 "optimizer each parameter once")
            seen.add(id(param))

        group = {**self.defaults, **param_group, "params": params}
        self._check_hyperparameters(group)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        """Reset the gradients of all optimized parameters.

        With `set_to_none` (the default) gradients become None, which saves
        memory and lets `step` skip parameters no loss reached;
        otherwise they are filled with zeros in place.
        """
        for group in self.param_groups:
            zero_grads(group["params"], set_to_none)

    def step(self, closure=None):
        """Update every parameter that has a gradient; return `closure()`'s loss.

        `closure`, if given, re-evaluates the model (zero_grad, forward,
        backward) and returns the loss; it runs with gradients enabled.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    with param.writing():
                        self._update(param, param.grad._array, group)
        return loss

    def state_dict(self):
        """The optimizer's state, in torch's layout.

        `{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}`
        where parameters are numbered across groups in order. The state
        Tensors are the optimizer's own (not copies), as in torch: save them
        or copy them before stepping again.
        """
        index_of = {}
        param_groups = []
        for group in self.param_groups:
            packed = {key: value for key, value in group.items() if key != "params"}
            packed["params"] = []
            for param in group["params"]:
                index_of[id(param)] = len(index_of)
                packed["params"].append(index_of[id(param)])
            param_groups.append(packed)
        state = {index_of[id(param)]: values for param, values in self.state.items()}
        return {"state": state, "param_groups": param_groups}

    def load_state_dict(self, state_dict):
        """Restore state saved by `state_dict`, from this or a fresh optimizer.

        The parameter groups must match in number and size, and each saved
        buffer must have its parameter's shape. Buffers are copied (cast to
        the parameter's dtype), so the saved dict can be reused; each group's
        hyper-parameters are replaced by the saved ones.
        """
        if not isinstance(state_dict, dict) or state_dict.keys() != {"state", "param_groups"}:
            raise ValueError("expected an optimizer state dict with keys 'state' and "
                             f"'param_groups', got {_describe(state_dict)}")
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(saved_groups)} parameter groups, "
                             f"but the optimizer has {len(self.param_groups)}")
        params = {}
        for i, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(f"loaded parameter group {i} has {len(saved['params'])} "
                                 f"parameters, but the optimizer's group {i} has "
                                 f"{len(group['params'])}")
            missing = self.defaults.keys() - saved.keys()
            if missing:
                raise ValueError(f"loaded parameter group {i} lacks {sorted(missing)}: was it "
                                 f"saved from a different optimizer than {type(self).__name__}?")
            params.update(zip(saved["params"], group["params"]))

        state = defaultdict(dict)
        for index, values in state_dict["state"].items():
            if index not in params:
                raise ValueError(f"loaded state refers to parameter {index!r}, but the "
                                 f"optimizer has parameters 0 to {len(params) - 1}")
            param = params[index]
            state[param] = {key: _copy_state(value, param, index, key)
                            for key, value in values.items()}
        self.param_groups = [{**copy.deepcopy({k: v for k, v in saved.items() if k != "params"}),
                              "params": group["params"]}
                             for group, saved in zip(self.param_groups, saved_groups)]
        self.state = state

    def _check_hyperparameters(self, group):
        """Raise ValueError for an invalid hyper-parameter in `group`."""

    def _update(self, param, grad, group):
        """Update `param._array` in place from `grad` (an ndarray)."""
        raise NotImplementedError


# Elements per block of a blocked update: the few arrays of one block stay in cache from the
# first op of the update to the last, so a step reads and writes each array about once
# instead of once per op. Measured against whole-array ops on the MLP's 1M-element weights.
BLOCK = 1 << 18


def blocks(*arrays):
    """One parameter's arrays (value, gradient, state, all the same shape) cut into matching
    flat blocks of BLOCK elements; the arrays whole when small or not all contiguous."""
    if arrays[0].size <= BLOCK or not all(a.flags.c_contiguous for a in arrays):
        yield arrays
        return
    flat = [a.reshape(-1) for a in arrays]
    for start in range(0, flat[0].size, BLOCK):
        yield [a[start:start + BLOCK] for a in flat]


def check_implementation(name, foreach, fused, differentiable):
    """torch's choice of kernels (foreach, fused) is accepted and has one answer here: every
    update is blocked, one pass per parameter. differentiable=True (a step autograd records)
    is not supported."""
    for flag, value in (("foreach", foreach), ("fused", fused)):
        if value not in (None, True, False):
            raise TypeError(f"{name}: {flag} must be None, True or False, got {value!r}")
    if differentiable:
        raise NotImplementedError(f"{name}: differentiable=True is not supported; mpigrad's "
                                  "optimizers step in place under no_grad")


class WorkArrays:
    """Scratch arrays for blocked updates, kept across steps (one per slot and dtype)."""

    def __init__(self):
        self._arrays = {}

    def like(self, array, slot=0):
        key = (slot, array.dtype)
        buffer = self._arrays.get(key)
        if buffer is None or buffer.size < array.size:
            buffer = self._arrays[key] = np.empty(max(array.size, min(BLOCK, 1 << 16)),
                                                  array.dtype)
        return buffer[:array.size].reshape(array.shape)


def check_non_negative(group, *names):
    """Raise torch's ValueError for the first of `names` that is negative in `group`."""
    for name in names:
        if not 0.0 <= group[name]:
            label = {"lr": "learning rate", "eps": "epsilon value"}.get(name, f"{name} value")
            raise ValueError(f"Invalid {label}: {group[name]}")


def regularized_grad(param, grad, weight_decay, maximize, out=None):
    """The gradient a step descends: `grad`, negated to maximize, plus the
    L2 term `weight_decay * param`. Either `grad` itself or an array
    written into `out` (new if None), never `grad` modified: it belongs
    to the parameter."""
    if weight_decay != 0:
        g = np.multiply(param, weight_decay, out=out)
        return np.subtract(g, grad, out=g) if maximize else np.add(g, grad, out=g)
    return np.negative(grad, out=out) if maximize else grad


def adam_moments_(m, v, g, beta1, beta2, out):
    """Adam's two running averages, in place: m = lerp(m, g, 1 - beta1) (torch's rounding),
    v = beta2 * v + (1 - beta2) * g * g. Returns `out`, the scratch used, free again."""
    scratch = lerp_(m, g, 1 - beta1, out=out)
    np.multiply(g, 1 - beta2, out=scratch)
    scratch *= g
    v *= beta2
    v += scratch
    return scratch


def lerp_(start, end, weight, out=None):
    """`start = lerp(start, end, weight)` in place, the way torch computes it: from
    `start` for a small weight, back from `end` otherwise, whichever rounds less.
    Returns the scratch array it used (`out` if given), free for the caller's next
    temporary."""
    scratch = np.subtract(end, start, out=out)
    if weight < 0.5:
        scratch *= weight
        start += scratch
    else:
        scratch *= 1 - weight
        np.subtract(end, scratch, out=start)
    return scratch


def addcmul_(target, tensor1, tensor2, value):
    """`target += value * tensor1 * tensor2` in place, rounded as torch's addcmul_."""
    product = np.multiply(tensor1, value)
    product *= tensor2
    target += product


def _copy_state(value, param, index, key):
    if not isinstance(value, Tensor):
        return copy.deepcopy(value)
    if value.shape != param.shape:
        raise ValueError(f"loaded state {key!r} of parameter {index} has shape {value.shape}, "
                         f"but the parameter has shape {param.shape}")
    return Tensor(np.array(value._array, dtype=param.dtype))


def _describe(obj):
    if isinstance(obj, dict):
        return f"a dict with keys {sorted(map(str, obj))}"
    return f"a {type(obj).__name__}"
