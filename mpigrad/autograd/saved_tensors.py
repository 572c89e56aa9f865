"""Saved-tensor hooks: choose how the graph keeps the tensors backward will need.

Inside `with saved_tensors_hooks(pack, unpack):` every tensor an op or a custom Function saves
for backward is handed to `pack(tensor)`, and the graph keeps only what pack returns. When
backward needs the tensor, and not before, it calls `unpack(packed)`, which must return a
tensor with the same values. Hooks are per thread; when several are nested, the innermost
pair alone applies. Activation checkpointing (`mpigrad.utils.checkpoint`) and offloading to
disk are built this way:

    def pack(tensor):                      # write it out, keep only the file name
        path = os.path.join(tmpdir, f"{uuid.uuid4().hex}.npy")
        np.save(path, tensor.detach().numpy())
        return path

    def unpack(path):                      # mapped back only when backward gets there
        return mpigrad.from_numpy(np.load(path, mmap_mode="r"))

    with saved_tensors_hooks(pack, unpack):
        loss = model(x).sum()
    loss.backward()

An unpacked tensor takes over the graph position of the one that was saved (the node that
made it, or its leaf), so gradients of gradients (`create_graph=True`) still reach the
original inputs.
"""
import weakref

from . import grad_mode


class saved_tensors_hooks:
    """Context manager: `pack(tensor) -> anything` at save time, `unpack(anything) -> tensor`
    when backward first uses it."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        state = grad_mode._State
        if state.saved_tensors_hooks_disabled is not None:
            raise RuntimeError(state.saved_tensors_hooks_disabled)
        self._outer = state.saved_tensors_hooks
        state.saved_tensors_hooks = (self.pack_hook, self.unpack_hook)
        return self

    def __exit__(self, *exc):
        grad_mode._State.saved_tensors_hooks = self._outer
        return False


class disable_saved_tensors_hooks:
    """Make any use of saved_tensors_hooks inside it an error carrying `error_message`."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        state = grad_mode._State
        self._outer = state.saved_tensors_hooks_disabled, state.saved_tensors_hooks
        if state.saved_tensors_hooks is not None:
            raise RuntimeError(self.error_message)
        state.saved_tensors_hooks_disabled = self.error_message
        return self

    def __exit__(self, *exc):
        state = grad_mode._State
        state.saved_tensors_hooks_disabled, state.saved_tensors_hooks = self._outer
        return False


def active_hooks():
    """The (pack, unpack) pair that applies on this thread now, or None."""
    return grad_mode._State.saved_tensors_hooks


class SavedTensor:
    """What a node keeps in place of a saved tensor while hooks are active.

    `edge` is the saved tensor's place in the graph, or for one of the saving node's own
    outputs just its number (holding the node here would make a reference cycle).
    """

    __slots__ = ("packed", "unpack_hook", "shape", "dtype", "edge")

    def __init__(self, hooks, tensor, edge):
        pack_hook, self.unpack_hook = hooks
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.edge = edge
        self.packed = pack_hook(tensor)

    def unpack(self, node):
        """The saved tensor, from the unpack hook, placed where it was in `node`'s graph."""
        from ..tensor import Tensor
        value = self.unpack_hook(self.packed)
        if not isinstance(value, Tensor):
            raise TypeError(f"the unpack hook of saved_tensors_hooks must return a Tensor, got "
                            f"{type(value).__name__}")
        edge = (node, self.edge) if type(self.edge) is int else self.edge
        return placed_at(value.data, edge)


def placed_at(array, edge):
    """A tensor over `array` that sits in the graph where `edge` points (None: nowhere)."""
    from ..tensor import Tensor
    from .graph import AccumulateGrad
    t = Tensor._make(array)
    if edge is not None:
        node, nr = edge
        t.requires_grad = True
        if type(node) is AccumulateGrad:
            t._accumulator = weakref.ref(node)  # gradients reach the original leaf
        else:
            t.grad_fn, t._output_nr = node, nr
    return t
