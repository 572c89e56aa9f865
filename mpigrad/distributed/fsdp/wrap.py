"""FSDP1's auto-wrap policies, torch.distributed.fsdp.wrap's names and signatures.

A policy is called as `policy(module=m, recurse=..., nonwrapped_numel=n)`: with recurse=True
it says whether to look inside `m` for modules to wrap, with recurse=False whether to make
`m` a unit of its own (`n`: the parameters of `m` no unit inside it has taken). Pass one with
its options bound, as in torch:

    FullyShardedDataParallel(model, auto_wrap_policy=functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={Block}))
"""
from ...nn.container import ModuleDict, ModuleList

__all__ = ["transformer_auto_wrap_policy", "size_based_auto_wrap_policy",
           "lambda_auto_wrap_policy", "ModuleWrapPolicy", "apply_auto_wrap"]


def transformer_auto_wrap_policy(module, recurse, nonwrapped_numel, transformer_layer_cls):
    """Wrap every module that is an instance of one of `transformer_layer_cls`."""
    if recurse:
        return True
    return isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module, recurse, nonwrapped_numel, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    """Wrap a module once the parameters no unit inside it took number at least
    `min_num_params`; never look inside `force_leaf_modules`, never wrap
    `exclude_wrap_modules` (default: containers, ModuleList and ModuleDict)."""
    force_leaf = tuple(force_leaf_modules or ())
    exclude = tuple(exclude_wrap_modules if exclude_wrap_modules is not None
                    else (ModuleList, ModuleDict))
    if recurse:
        return not (force_leaf and isinstance(module, force_leaf))
    return nonwrapped_numel >= min_num_params and not isinstance(module, exclude)


def lambda_auto_wrap_policy(module, recurse, nonwrapped_numel, lambda_fn):
    """Wrap every module for which `lambda_fn(module)` is true."""
    return True if recurse else bool(lambda_fn(module))


class ModuleWrapPolicy:
    """Wrap every module of one of the classes in `module_classes` (torch's class form of the
    transformer policy)."""

    def __init__(self, module_classes):
        self._classes = tuple(module_classes)

    def __call__(self, module, recurse, nonwrapped_numel):
        return transformer_auto_wrap_policy(module, recurse, nonwrapped_numel, self._classes)


def apply_auto_wrap(root, policy, wrap, is_wrapped):
    """Visit `root`'s submodules children first, calling `wrap(m)` on each that `policy`
    selects (never `root` itself, which its caller wraps). `is_wrapped(p)`: whether parameter
    `p` already belongs to a unit."""
    if not callable(policy):
        raise TypeError(f"auto_wrap_policy must be callable as policy(module, recurse, "
                        f"nonwrapped_numel), got {policy!r}")
    _visit(root, policy, wrap, is_wrapped, True)


def _visit(module, policy, wrap, is_wrapped, is_root):
    if policy(module=module, recurse=True, nonwrapped_numel=_unwrapped(module, is_wrapped)):
        for child in module.children():
            _visit(child, policy, wrap, is_wrapped, False)
    if not is_root and policy(module=module, recurse=False,
                              nonwrapped_numel=_unwrapped(module, is_wrapped)):
        wrap(module)


def _unwrapped(module, is_wrapped):
    return sum(p.numel() for p in module.parameters() if not is_wrapped(p))
