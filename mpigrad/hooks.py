"""Hook registries: a dict of callables and the handle that removes one (torch.utils.hooks).

A leaf module, so that Tensor, the autograd graph and nn.Module can all use it without
importing each other.
"""
import itertools


class RemovableHandle:
    """Returned by every hook registration; `remove()` unregisters it."""

    _ids = itertools.count()

    def __init__(self, hooks_dict):
        self.id = next(RemovableHandle._ids)
        self._hooks = hooks_dict

    def remove(self):
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def add_hook(hooks, fn):
    handle = RemovableHandle(hooks)
    hooks[handle.id] = fn
    return handle
