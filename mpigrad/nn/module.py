"""Module: the base of every layer. Holds parameters, buffers and submodules by name."""
import collections
import itertools
import warnings

import numpy as np

from .. import dtypes
from ..autograd import Function, grad_mode
from ..device import require_cpu
from ..hooks import add_hook
from ..tensor import Tensor, to_arguments, zero_grads
from .parameter import Buffer, Parameter

IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """torch.nn.Module's contract: assign Parameters and Modules as attributes, implement
    `forward`, call the module."""

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks", collections.OrderedDict())
        object.__setattr__(self, "_backward_pre_hooks", collections.OrderedDict())
        object.__setattr__(self, "_backward_hooks", collections.OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks):  # most calls: straight to forward
            return self.forward(*args, **kwargs)
        for hook in list(self._forward_pre_hooks.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        backward_hooks = None
        if (self._backward_hooks or self._backward_pre_hooks) and grad_mode.is_grad_enabled():
            backward_hooks = _BackwardHooks(self)
            args = backward_hooks.wrap_inputs(args)
        output = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            result = hook(self, args, output)
            if result is not None:
                output = result
        if backward_hooks is not None:
            output = backward_hooks.wrap_outputs(output)
        return output

    def register_forward_pre_hook(self, hook):
        return add_hook(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook):
        return add_hook(self._forward_hooks, hook)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """`hook(module, grad_output) -> new grad_output or None`, called when the gradients
        with respect to the module's outputs are known, before they go into the module."""
        return _add_ordered_hook(self._backward_pre_hooks, hook, prepend)

    def register_full_backward_hook(self, hook, prepend=False):
        """`hook(module, grad_input, grad_output) -> new grad_input or None`, called once the
        gradients with respect to the module's positional inputs are known (as in torch: None
        for arguments that are not tensors, zeros for tensors that do not require grad, and
        None for all when none does, the hook then running as soon as grad_output is known)."""
        return _add_ordered_hook(self._backward_hooks, hook, prepend)

    # ------------------------------------------------------------- registration
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign attributes before Module.__init__() is called; "
                                 "call super().__init__() first")
        if value is None and name in self._parameters:
            self._parameters[name] = None  # e.g. `self.bias = None` keeps the slot, as in torch
            return
        if (name in self._buffers and not isinstance(value, Parameter)
                and (value is None or isinstance(value, Tensor))):
            # As torch: a tensor (or None) assigned to a buffer's name replaces the buffer, so
            # it stays in state_dict (`bn.running_mean = other.running_mean`).
            self._buffers[name] = value
            return
        if isinstance(value, Parameter):
            kept = self._parameters
        elif isinstance(value, Buffer):
            kept, value = self._buffers, Tensor.wrap(value._array)
        elif isinstance(value, Module):
            kept = self._modules
        else:
            kept = None
        # A name already in the store it goes to keeps its place there (torch's OrderedDict
        # assignment), so replacing a child keeps the order of children().
        for store in (self._parameters, self._buffers, self._modules):
            if store is not kept:
                store.pop(name, None)
        if kept is None:
            object.__setattr__(self, name, value)
            return
        kept[name] = value
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        for store in ("_parameters", "_buffers", "_modules"):
            values = self.__dict__.get(store)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign {type(param).__name__} as parameter '{name}' "
                            "(a Parameter or None is required)")
        self.__dict__.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign {type(tensor).__name__} as buffer '{name}' "
                            "(a Tensor or None is required)")
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self.__dict__.pop(name, None)
        self._modules[name] = module

    register_module = add_module

    # ------------------------------------------------------------- traversal
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        memo = set() if memo is None else memo
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, f"{prefix}.{name}" if prefix else name,
                                                remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and module not in seen:
                seen.add(module)
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, store, prefix, recurse, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in getattr(module, store).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_parameter(self, target):
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if name not in module._parameters:
            raise AttributeError(f"{type(module).__name__} has no parameter '{name}'")
        return module._parameters[name]

    def get_submodule(self, target):
        module = self
        for part in filter(None, target.split(".")):
            if part not in module._modules:
                raise AttributeError(f"{type(module).__name__} has no submodule '{part}'")
            module = module._modules[part]
        return module

    # ------------------------------------------------------------- modes and utilities
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be a bool, got {type(mode).__name__}")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        zero_grads(self.parameters(), set_to_none)

    def apply(self, fn):
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def _convert(self, dtype):
        dtype = np.dtype(dtype)
        with grad_mode.no_grad():
            for t in itertools.chain(self.parameters(), self.buffers()):
                if dtypes.is_floating_point(t.dtype) and t.dtype != dtype:
                    t._array = t._array.astype(dtype)
                    if t.grad is not None:
                        t.grad._array = t.grad._array.astype(dtype)
        return self

    def to(self, *args, **kwargs):
        """torch's forms: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)``.
        Casts floating parameters and buffers in place; the device must be the CPU (an error
        names any other, as torch does on a machine without it)."""
        dtype, _ = to_arguments("Module.to", args, kwargs)
        if dtype is None:
            return self
        if not dtypes.is_floating_point(dtype):
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but got "
                            f"desired dtype={np.dtype(dtype)}")
        return self._convert(dtype)

    def double(self):
        return self._convert(np.float64)

    def float(self):
        return self._convert(np.float32)

    def half(self):
        return self._convert(dtypes.float16)

    def bfloat16(self):
        return self._convert(dtypes.bfloat16)

    def cpu(self):
        return self

    def cuda(self, device=None):
        require_cpu("Module.cuda", "cuda")

    # ------------------------------------------------------------- state
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        destination = collections.OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination, prefix + name + ".", keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict=True):
        """Copies values into the existing tensors. With strict, any missing, unexpected or
        mis-shaped key is an error that lists them all."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        mismatched = []
        for key, target in own.items():
            if key in state_dict:
                value = state_dict[key]
                shape = tuple(np.shape(value._array if isinstance(value, Tensor) else value))
                if shape != tuple(target.shape):
                    mismatched.append(f"size mismatch for {key}: the checkpoint has shape "
                                      f"{shape}, the model has {tuple(target.shape)}")
        problems = list(mismatched)
        if strict and missing:
            problems.append(f"Missing key(s) in state_dict: {', '.join(missing)}")
        if strict and unexpected:
            problems.append(f"Unexpected key(s) in state_dict: {', '.join(unexpected)}")
        if problems:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(problems))
        with grad_mode.no_grad():
            for key, target in own.items():
                if key in state_dict:
                    value = state_dict[key]
                    target.copy_(value._array if isinstance(value, Tensor) else np.asarray(value))
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------- printing
    def extra_repr(self):
        return ""

    def __repr__(self):
        # torch's layout: a lone one-line extra_repr inline, else one line per entry.
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + _indented(repr(m)) for name, m in self._modules.items()]
        return _repr_with_lines(self, extra_lines, child_lines)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


def _indented(text):
    return text.replace("\n", "\n  ")


def _repr_with_lines(module, extra_lines, child_lines):
    if len(extra_lines) == 1 and not child_lines:
        return f"{type(module).__name__}({extra_lines[0]})"
    lines = extra_lines + child_lines
    body = "\n  " + "\n  ".join(lines) + "\n" if lines else ""
    return f"{type(module).__name__}({body})"


def _add_ordered_hook(hooks, hook, prepend):
    handle = add_hook(hooks, hook)
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def _call_gradient_hooks(hooks, call, grads, what):
    """Run hooks in order; one that returns a tuple replaces the gradients the next sees."""
    for hook in list(hooks.values()):
        result = call(hook, grads)
        if result is None:
            continue
        result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(result) != len(grads):
            raise RuntimeError(f"backward hook {getattr(hook, '__name__', hook)!r} returned "
                               f"{len(result)} values for {what}, expected {len(grads)}")
        grads = result
    return grads


class _BackwardHooks:
    """One forward call's full backward hooks (torch's BackwardHook).

    The inputs that require grad, and the outputs, each pass through an identity Function.
    In backward the outputs' identity runs first, with every gradient w.r.t. the outputs at
    once: the pre-hooks see (and may replace) them. The inputs' identity runs when every
    gradient w.r.t. the inputs is known: the full hooks see both and may replace grad_input.
    """

    def __init__(self, module):
        self.module = module
        self.n_inputs = 0
        self.input_positions = ()
        self.constant_inputs = ()  # (position, shape, dtype) of tensors not requiring grad
        self.grad_outputs = None

    def wrap_inputs(self, args):
        self.n_inputs = len(args)
        self.input_positions = tuple(i for i, a in enumerate(args)
                                     if isinstance(a, Tensor) and a.requires_grad)
        self.constant_inputs = tuple((i, a.shape, a.dtype) for i, a in enumerate(args)
                                     if isinstance(a, Tensor) and not a.requires_grad)
        if not self.input_positions or not self.module._backward_hooks:
            return args
        wrapped = _Identity.apply(self._inputs_done, *[args[i] for i in self.input_positions])
        args = list(args)
        for i, w in zip(self.input_positions, wrapped):
            args[i] = w
        return tuple(args)

    def wrap_outputs(self, output):
        single = isinstance(output, Tensor)
        outputs = (output,) if single else output
        if not isinstance(outputs, (tuple, list)):
            return output
        positions = [i for i, o in enumerate(outputs) if isinstance(o, Tensor) and o.requires_grad]
        if not positions:
            return output
        wrapped = _Identity.apply(self._outputs_done, *[outputs[i] for i in positions])
        outputs = list(outputs)
        for i, w in zip(positions, wrapped):
            outputs[i] = w
        return outputs[0] if single else type(output)(outputs)

    def _outputs_done(self, grads):
        module = self.module
        grads = _call_gradient_hooks(module._backward_pre_hooks,
                                     lambda hook, g: hook(module, g), grads, "grad_output")
        self.grad_outputs = grads
        if not self.input_positions and module._backward_hooks:
            # No input needs a gradient, so the input side never runs: call the hooks now.
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients",
                          stacklevel=2)
            none = (None,) * self.n_inputs
            for hook in list(module._backward_hooks.values()):
                result = hook(module, none, grads)
                if result is not None and any(r is not None for r in result):
                    raise RuntimeError("a full backward hook of a module none of whose inputs "
                                       "requires grad must return None (or all None)")
        return grads

    def _inputs_done(self, grads):
        module = self.module
        grad_input = [None] * self.n_inputs
        for i, g in zip(self.input_positions, grads):
            grad_input[i] = g
        for i, shape, dtype in self.constant_inputs:  # torch shows them zero, not None
            grad_input[i] = Tensor.wrap(np.zeros(shape, dtype))
        grad_input = _call_gradient_hooks(
            module._backward_hooks, lambda hook, g: hook(module, g, self.grad_outputs),
            tuple(grad_input), "grad_input")
        return tuple(grad_input[i] for i in self.input_positions)


class _Identity(Function):
    """Passes tensors through; in backward hands all their gradients to `on_backward` at once."""

    @staticmethod
    def forward(ctx, on_backward, *tensors):
        ctx.on_backward = on_backward
        ctx.set_materialize_grads(False)
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + tuple(ctx.on_backward(grads))

    @staticmethod
    def jvp(ctx, on_backward_tangent, *tangents):
        return tangents  # the identity: forward-mode AD passes through hooked modules
