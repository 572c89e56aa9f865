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
            params = [p for p in group["params"] if p.grad is not None]
            # As torch: a sparse gradient stops the step before this group changes, unless
            # the optimizer has a sparse update (SGD, Adagrad, SparseAdam).
            if self.sparse_refusal is not None and any(p.grad.is_sparse for p in params):
                raise RuntimeError(self.sparse_refusal.format(name=type(self).__name__))
            for param in params:
                grad = param.grad
                with param.writing():
                    if grad.is_sparse:
                        self._update_sparse(param, grad, group)
                    else:
                        self._update(param, grad._array, group)
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
            # A dict saved before the groups held torch's kernel flags takes this optimizer's.
            missing = self.defaults.keys() - saved.keys() - _KERNEL_FLAGS
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
        self.param_groups = [{**{k: group[k] for k in _KERNEL_FLAGS & group.keys()},
                              **copy.deepcopy({k: v for k, v in saved.items() if k != "params"}),
                              "params": group["params"]}
                             for group, saved in zip(self.param_groups, saved_groups)]
        self.state = state

    def _check_hyperparameters(self, group):
        """Raise ValueError for an invalid hyper-parameter in `group`."""

    def _update(self, param, grad, group):
        """Update `param._array` in place from `grad` (an ndarray)."""
        raise NotImplementedError

    # torch's error for a sparse gradient, or None where `_update_sparse` takes one.
    sparse_refusal = "{name} does not support sparse gradients"

    def _update_sparse(self, param, grad, group):
        """Update `param` in place from the sparse `grad` (mpigrad.sparse.SparseTensor)."""
        raise NotImplementedError


_KERNEL_FLAGS = frozenset({"foreach", "fused", "capturable", "differentiable"})


def check_implementation(name, foreach, fused, differentiable):
    """torch's choice of kernels, with torch's errors for the combinations it refuses. Every
    choice runs the same here: one pass per parameter through the backend's update kernel
    (`fused` is accepted where torch accepts it on CPU: SGD, Adam, AdamW, Adagrad).
    differentiable=True (a step autograd records) is not supported."""
    for flag, value in (("foreach", foreach), ("fused", fused)):
        if value not in (None, True, False):
            raise TypeError(f"{name}: {flag} must be None, True or False, got {value!r}")
    if fused:
        if differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if differentiable:
        raise NotImplementedError(f"{name}: differentiable=True is not supported; mpigrad's "
                                  "optimizers step in place under no_grad")


def check_capturable(group, what="params and state_steps"):
    """capturable=True asks for CUDA-graph-safe steps, which torch refuses at the step on CPU
    (unless fused, whose CPU kernel serves it): the same error here."""
    if group.get("capturable") and not group.get("fused"):
        raise AssertionError(f"If capturable=True, {what} must be on supported devices: "
                             "['cuda', 'xpu', 'hpu', 'privateuseone', 'xla'].")


def check_lr_tensor(lr, foreach, capturable):
    """torch's Adam and AdamW take a Tensor lr except with foreach=True and not capturable."""
    if isinstance(lr, Tensor) and foreach and not capturable:
        raise ValueError("lr as a Tensor is not supported for capturable=False and foreach=True")


def check_non_negative(group, *names):
    """Raise torch's ValueError for the first of `names` that is negative in `group`."""
    for name in names:
        if not 0.0 <= group[name]:
            label = {"lr": "learning rate", "eps": "epsilon value"}.get(name, f"{name} value")
            raise ValueError(f"Invalid {label}: {group[name]}")


def decay_split(group, decoupled):
    """(decay_factor, weight_decay) for an Adam-family kernel: decoupled decay (AdamW's) shrinks
    p by 1 - lr weight_decay before the step; coupled decay adds weight_decay p to the
    gradient."""
    weight_decay = group["weight_decay"]
    if decoupled:
        return (1 - group["lr"] * weight_decay if weight_decay != 0 else 1.0), 0.0
    return 1.0, weight_decay


def _copy_state(value, param, index, key):
    if not isinstance(value, Tensor):
        return copy.deepcopy(value)
    # 0-d state is a per-parameter scalar (ASGD's eta and mu); torch casts it as the rest.
    if value.ndim != 0 and value.shape != param.shape:
        raise ValueError(f"loaded state {key!r} of parameter {index} has shape {value.shape}, "
                         f"but the parameter has shape {param.shape}")
    return Tensor(np.array(value._array, dtype=param.dtype))


def _describe(obj):
    if isinstance(obj, dict):
        return f"a dict with keys {sorted(map(str, obj))}"
    return f"a {type(obj).__name__}"
