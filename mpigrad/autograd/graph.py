"""Graph nodes: what backward walks.

Every differentiable result points at the Node that made it (`grad_fn`), and every Node
keeps `next_edges`, one per input: `(node, output_nr)` or None for an input that needs
no gradient. Leaves that require grad are reached through their AccumulateGrad node.
"""
import itertools
import threading
import weakref

from ..hooks import add_hook
from . import anomaly, grad_mode

_sequence = itertools.count()
_accumulator_lock = threading.Lock()


class Meta:
    """What a node keeps of an input whose value it did not save: its shape and dtype."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)


class Node:
    """A step of the backward pass. Subclasses implement `apply(grad_outputs) -> input grads`."""

    __slots__ = ("next_edges", "seq", "pre_hooks", "creation_stack", "_freed", "__weakref__")
    # Whether apply() returns arrays nobody else holds (apart from incoming gradients passed
    # through), so a leaf may keep one as its .grad without a copy. Custom code may return
    # anything, so by default no.
    fresh_gradients = False

    def __init__(self, next_edges):
        self.next_edges = next_edges
        self.seq = next(_sequence)
        self.pre_hooks = None
        self._freed = False
        self.creation_stack = anomaly.creation_stack() if anomaly._State.enabled else None

    def name(self):
        return type(self).__name__

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    # A class attribute, read once per node in backward; multi-output nodes override it.
    num_outputs = 1
    # Whether scatter_into may add this node's one input gradient into a buffer in place.
    scatters = False

    def apply(self, grad_outputs):
        raise NotImplementedError

    def release(self):
        """Drop saved values once backward has used them (retain_graph=False)."""

    def register_prehook(self, fn, output_nr=0):
        if self.pre_hooks is None:
            self.pre_hooks = {}
        return add_hook(self.pre_hooks.setdefault(output_nr, {}), fn)

    def check_not_freed(self):
        if self._freed:
            raise RuntimeError(
                f"{self.name()}: backward is going through this part of the graph a second "
                "time, but its saved tensors were freed after the first backward. Pass "
                "retain_graph=True to the first backward() or autograd.grad() call if you "
                "need to backward through the graph again.")


class AccumulateGrad(Node):
    """Sink for a leaf: runs the leaf's hooks, accumulates into `.grad`, then post-accumulate hooks.

    It runs as soon as every consumer of the leaf has contributed, so a post-accumulate hook
    (DistributedDataParallel's) sees a finished gradient while the rest of backward goes on.
    """

    __slots__ = ("variable",)

    def __init__(self, variable):
        super().__init__(())
        self.variable = variable

    def name(self):
        return "AccumulateGrad"

    def apply(self, grad_outputs):
        raise AssertionError("the engine accumulates leaves itself")


def accumulator_for(tensor):
    """The one AccumulateGrad of a leaf while a graph uses it, so all uses meet in one node."""
    ref = tensor._accumulator
    acc = ref() if ref is not None else None
    if acc is None:
        with _accumulator_lock:  # two threads' forwards through one parameter share its node
            ref = tensor._accumulator
            acc = ref() if ref is not None else None
            if acc is None:
                acc = AccumulateGrad(tensor)
                tensor._accumulator = weakref.ref(acc)
    return acc


def reachable(root_nodes):
    """Every node backward from `root_nodes` could reach, the roots included."""
    seen = set(root_nodes)
    stack = list(root_nodes)
    while stack:
        for edge in stack.pop().next_edges:
            if edge is not None and edge[0] not in seen:
                seen.add(edge[0])
                stack.append(edge[0])
    return seen


def gradient_edge(tensor):
    if tensor.grad_fn is not None:
        return (tensor.grad_fn, tensor._output_nr)
    if tensor.requires_grad:
        return (accumulator_for(tensor), 0)
    return None


def reduce_to(grad, like):
    """Sum a gradient over broadcast dimensions and cast it, so it matches its input.

    Every node's gradients pass through here (`like` needs only `shape` and `dtype`), so
    broadcasting and dtype are undone once, never inside a rule.
    """
    shape = like.shape
    if grad.shape != shape:
        lead = grad.ndim - len(shape)
        if lead < 0 or any(s != 1 and s != gs for s, gs in zip(shape, grad.shape[lead:])):
            raise RuntimeError(f"a gradient of shape {tuple(grad.shape)} cannot be summed to "
                               f"its input's shape {tuple(shape)}")
        if lead:
            grad = grad.sum(tuple(range(lead)))
        ones = tuple(i for i, s in enumerate(shape) if s == 1 and grad.shape[i] != 1)
        if ones:
            grad = grad.sum(ones, keepdim=True)
    if grad.dtype != like.dtype:
        grad = grad.to(like.dtype)
    return grad


class saved_tensors_hooks:
    """Context manager choosing how the graph keeps the tensors backward will need.

    Inside `with saved_tensors_hooks(pack, unpack):` every tensor an op or a custom Function
    saves for backward is handed to `pack(tensor)`, and the graph keeps only what pack
    returns. When backward needs the tensor, and not before, it calls `unpack(packed)`, which
    must return a tensor with the same values. Hooks are per thread; when several are nested,
    the innermost pair alone applies. Activation checkpointing (`mpigrad.utils.checkpoint`)
    and offloading are built this way, e.g. to disk:

        def pack(tensor):                      # write it out, keep only the file name
            path = os.path.join(tmpdir, f"{uuid.uuid4().hex}.npy")
            np.save(path, tensor.detach().numpy())
            return path

        def unpack(path):                      # mapped back only when backward gets there
            return mpigrad.from_numpy(np.load(path, mmap_mode="r"))

        with saved_tensors_hooks(pack, unpack):
            loss = model(x).sum()
        loss.backward()

    An unpacked tensor takes over the graph position of the one that was saved, so gradients
    of gradients (`create_graph=True`) still reach the original inputs.
    """

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
