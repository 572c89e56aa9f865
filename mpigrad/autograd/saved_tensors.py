"""What a node keeps in place of a saved tensor while saved-tensor hooks are active.

The hooks themselves (`saved_tensors_hooks`, `disable_saved_tensors_hooks`) are in
autograd/graph.py, where torch has them; this is the other half, used by the ops and by
custom Functions when they save.
"""
from ..tensor import Tensor


class SavedTensor:
    """A saved tensor as `pack` returned it, with what backward checks before unpacking.

    `edge` is the saved tensor's place in the graph, or for one of the saving node's own
    outputs just its number (holding the node here would make a reference cycle). Like a
    saved tensor it has `shape`, `dtype` and `_version` (its storage's version now), so the
    checks for in-place changes read it the same way.
    """

    __slots__ = ("packed", "unpack_hook", "shape", "dtype", "edge", "_counter")

    def __init__(self, hooks, tensor, edge):
        pack_hook, self.unpack_hook = hooks
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.edge = edge
        self._counter = tensor._vc  # read, never written: the version check needs it
        self.packed = pack_hook(tensor)

    @property
    def _version(self):
        return self._counter[0]

    def unpack(self, node):
        """The saved tensor, from the unpack hook, placed where it was in `node`'s graph, so
        gradients of gradients (create_graph) still reach the original inputs."""
        value = self.unpack_hook(self.packed)
        if not isinstance(value, Tensor):
            raise TypeError(f"the unpack hook of saved_tensors_hooks must return a Tensor, got "
                            f"{type(value).__name__}")
        tensor = Tensor.wrap(value._array)
        edge = (node, self.edge) if type(self.edge) is int else self.edge
        if edge is not None:
            # A leaf's edge is its AccumulateGrad node: gradients still reach that leaf.
            tensor.set_history(*edge)
        return tensor
