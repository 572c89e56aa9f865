"""The backward engine.

It counts, for every node reachable from the roots, how many edges point at it, then runs
nodes from a ready queue: a node becomes ready once every consumer has sent its gradient, so
each node runs exactly once with the full sum. Among ready nodes the most recently created
goes first, and a leaf's AccumulateGrad goes before anything else (leaves among themselves in
the order they became ready), so leaves finish (and their post-accumulate hooks fire) as
early as the graph allows.

Several threads may run backward at once. Everything a pass needs is local to its call or to
its thread (grad mode, the running task), so independent graphs never meet; where graphs
share leaves, their `.grad` updates are serialised by one lock.
"""
import heapq
import itertools
import threading

import numpy as np

from . import anomaly, grad_mode
from .graph import AccumulateGrad, reachable

_task_ids = itertools.count(1)
_leaf_lock = threading.Lock()


class _Running(threading.local):
    # The backward passes running on this thread, innermost last (a hook or a checkpoint's
    # recomputation may start another one).
    tasks = ()


_running = _Running()

# Set by the profiler while one is recording: `observer(name, fn, *args)` runs fn(*args) as a
# timed event. The engine cannot import the profiler (it sits above the Tensor layer), so the
# profiler plugs itself in here.
observer = None
# forward_ad's state (its `level`: the active dual level or None), plugged in by forward_ad,
# which sits above the engine: a sum must keep its tangent while a dual level is active.
dual_state = None


class GraphTask:
    """One call of run_backward and the state of its pass.

    `accumulate`: gradients go into leaves' `.grad` (else they are captured into `results`,
    one per captured edge, from `captures[node] = [(nr, position)]`). `buffers[node][nr]` is
    the gradient summed so far for that output of `node`; for a single-output node or a
    leaf's AccumulateGrad, `owned[node]` says whether nothing else can see its array (so
    later gradients may be added into it in place, and a leaf may keep it as `.grad`
    without a copy).
    `deps[node]` counts the edges into `node` still to run; `ready` is the heap of nodes whose
    count reached zero, highest priority first, then in the order they became ready
    (`tiebreak`, for leaves: other nodes' creation numbers differ). `callbacks` run when the
    pass ends (queue_callback)."""

    __slots__ = ("id", "accumulate", "retain_graph", "create_graph", "check_anomaly",
                 "observe", "callbacks", "buffers", "owned", "captures", "results", "deps",
                 "ready", "tiebreak")

    def __init__(self, accumulate, retain_graph, create_graph):
        self.id = next(_task_ids)
        self.accumulate = accumulate
        self.retain_graph = retain_graph
        self.create_graph = create_graph
        self.check_anomaly = anomaly.is_anomaly_enabled()
        self.observe = observer
        self.callbacks = []
        self.buffers, self.owned, self.captures = {}, {}, {}
        self.results = []
        self.deps = {}
        self.ready = []
        self.tiebreak = itertools.count()


def current_task():
    """The innermost backward pass running on this thread, or None."""
    tasks = _running.tasks
    return tasks[-1] if tasks else None


def queue_callback(callback, on_error=None):
    """Run `callback()` once, when the backward pass that is running now finishes.

    If the pass raises before it gets there (a hook or a node failed), `on_error(exc)` runs
    instead, if given; the pass then raises `exc`, or whatever `on_error` raised. Either way
    every queued callback gets its turn: one that raises does not skip the others, and the
    first error is the one raised."""
    task = current_task()
    if task is None:
        raise RuntimeError("queue_callback() can only be called while a backward pass is "
                           "running, e.g. from a tensor hook.")
    task.callbacks.append((callback, on_error))


def _run_callbacks(callbacks, error=None):
    """Run every queued callback (its on_error(error) one if the pass failed with `error`,
    which is raised afterwards unless a callback raised first). Callbacks may queue more."""
    first = None
    while callbacks:
        callback, on_error = callbacks.pop(0)
        try:
            if error is None:
                callback()
            elif on_error is not None:
                on_error(error)
        except BaseException as exc:  # the others still run; the first error is raised
            if first is None:
                first = exc
    if first is not None:
        raise first
    if error is not None:
        raise error


def _needed_for(nodes, targets):
    """The nodes from which some target can be reached (children always precede parents in seq)."""
    needed = set()
    for node in sorted(nodes, key=lambda n: n.seq):
        if node in targets or any(e is not None and e[0] in needed for e in node.next_edges):
            needed.add(node)
    return needed


def _dependencies(active):
    deps = dict.fromkeys(active, 0)
    for node in active:
        for edge in node.next_edges:
            if edge is not None and edge[0] in deps:
                deps[edge[0]] += 1
    return deps


def _ready_entry(node, tiebreak):
    """The ready heap's entry for `node`: leaves first, then the most recently created."""
    if type(node) is AccumulateGrad:
        return (_LEAF, next(tiebreak), node)
    return (-node.seq, node)


_LEAF = float("-inf")


def _add_to_buffer(buffers, owned, node, nr, grad, fresh, in_place):
    """Add `grad` to the gradient of `node`'s output `nr` so far. A single-output node's sum
    is noted in `owned` as for a leaf (_add_to_leaf_buffer), and with `in_place` an owned
    sum takes the next gradient into its own array."""
    buf = buffers.get(node)
    if buf is None:
        outputs = node.num_outputs
        if outputs == 1:  # most nodes: the buffer is the gradient alone
            buffers[node] = [grad]
            owned[node] = fresh
            return
        buf = buffers[node] = [None] * outputs
    if buf[nr] is None:
        buf[nr] = grad
    elif node.num_outputs == 1:
        _add_owned(buf, owned, node, grad, in_place)
    else:
        buf[nr] = _sum(buf[nr], grad)


def _add_to_leaf_buffer(buffers, owned, node, grad, fresh, in_place):
    """_add_to_buffer for a leaf's AccumulateGrad, noting whether the sum's array is `fresh`
    (nothing else can see it); a sum made here always is."""
    buf = buffers.get(node)
    if buf is None:
        buffers[node] = [grad]
        owned[node] = fresh
    else:
        _add_owned(buf, owned, node, grad, in_place)


def _add_owned(buf, owned, node, grad, in_place):
    """buf[0] += grad: with `in_place`, into the sum so far when only this pass holds it,
    else into a new array; either way the sum is owned from then on."""
    total = buf[0]
    if (in_place and owned[node] and not total.is_sparse and not grad.is_sparse
            and total.shape == grad.shape and total.dtype == grad.dtype):
        np.add(total._array, grad._array, out=total._array)
    else:
        buf[0] = _sum(total, grad)
        owned[node] = True


def _sum(a, b):
    """a + b for two gradients, either of which may be sparse (Embedding(sparse=True)'s):
    sparse + sparse stays sparse, and a dense one with a sparse one is dense, added in the
    one order sparse tensors allow."""
    return b + a if a.is_sparse and not b.is_sparse else a + b


def _is_fresh(grad, *others):
    """Whether `grad`'s array owns its memory and none of `others` (lists of gradients that
    other code holds) is it or a view of it. An array that owns its memory shares it with no
    other owner, and numpy points every view's base at the owner itself, so identity
    answers what np.may_share_memory would, at a fraction of the cost per node."""
    if grad.is_sparse:
        return False  # its arrays may be shared with the tensor it was built from
    data = grad._array
    if data.base is not None:
        return False
    for group in others:
        for other in group:
            if (other is not None and not other.is_sparse
                    and (other._array is data or other._array.base is data)):
                return False
    return True


def _scattered(node, grads, buffers, owned):
    """Whether `node`, one whose input gradient is its output's gradient placed into zeros
    (a slice of its input), added that gradient straight into its input's gradient so far:
    done when that is an array only this pass holds (the other pieces of a split, say)."""
    edge = node.next_edges[0]
    if edge is None or not owned.get(edge[0]):
        return False
    return node.scatter_into(grads[0], buffers[edge[0]][0])


def _any_gradient(grads):
    # Not `grads.count(None)`: that compares with ==, which Tensor overloads.
    for g in grads:
        if g is not None:
            return True
    return False


def _run_tensor_hooks(hooks, grad):
    for hook in list(hooks.values()):
        result = hook(grad)
        if result is not None:
            grad = result
    return grad


def _accumulate_into_leaf(variable, grad, create_graph, owned):
    if variable._hooks:
        grad = _run_tensor_hooks(variable._hooks, grad)
        owned = False  # a hook may have kept the array (to log it, say)
    with _leaf_lock:
        current = variable.grad
        if current is None:
            # Take the incoming buffer when nothing else can see it; copy otherwise so two
            # leaves never share (and later corrupt) one .grad array.
            variable.grad = (grad if owned else grad.clone() if create_graph
                             else grad.detach().clone())
        elif create_graph or current.requires_grad:
            variable.grad = _sum(current, grad)
        elif current.is_sparse:
            # sparse += sparse in place (torch's uncoalesced sum); sparse += dense makes a
            # new dense gradient, as torch's
            if grad.is_sparse:
                current.add_(grad)
            else:
                variable.grad = grad + current
        elif grad.is_sparse:
            current.add_(grad)
        else:
            with current.writing() as data:
                np.add(data, grad._array, out=data)
    if variable._post_accumulate_hooks:
        for hook in list(variable._post_accumulate_hooks.values()):
            hook(variable)


def _check_finite(node, grads):
    for i, g in enumerate(grads):
        if g is not None and not np.isfinite(g._values()._array if g.is_sparse
                                             else g._array).all():
            where = node.creation_stack or "(no forward trace was recorded)\n"
            raise RuntimeError(f"Function '{node.name()}' returned nan or inf values in its "
                               f"{i}th output (the gradient for its input {i}). The forward "
                               f"call that created it:\n{where}")


def run_backward(root_edges, root_grads, retain_graph, create_graph, capture_edges=None):
    """Propagate `root_grads` from `root_edges` through the graph.

    With `capture_edges` None, gradients accumulate into leaves' `.grad`. Otherwise the total
    gradient reaching each captured edge is returned, in order, and no `.grad` is touched.
    """
    task = GraphTask(capture_edges is None, retain_graph, create_graph)
    buffers = task.buffers
    for (node, nr), grad in zip(root_edges, root_grads):
        if type(node) is AccumulateGrad:
            _add_to_leaf_buffer(buffers, task.owned, node, grad, False, False)  # caller's
        else:
            _add_to_buffer(buffers, task.owned, node, nr, grad, False, False)

    nodes = reachable(list(buffers))
    if not task.accumulate:
        for pos, (node, nr) in enumerate(capture_edges):
            task.captures.setdefault(node, []).append((nr, pos))
        nodes = _needed_for(nodes, task.captures)
        task.results = [None] * len(capture_edges)
    deps = task.deps = _dependencies(nodes)
    task.ready = [_ready_entry(n, task.tiebreak) for n in buffers if n in deps and deps[n] == 0]
    heapq.heapify(task.ready)
    callbacks = task.callbacks
    outer_tasks = _running.tasks
    _running.tasks = outer_tasks + (task,)
    mode = grad_mode._State
    previous_mode = mode.enabled
    mode.enabled = create_graph
    try:
        try:
            _propagate(task)
        except BaseException as error:
            mode.enabled = previous_mode
            _run_callbacks(callbacks, error)
        mode.enabled = previous_mode  # callbacks run in the caller's mode
        _run_callbacks(callbacks)
    finally:
        mode.enabled = previous_mode
        _running.tasks = outer_tasks
    return task.results


def _propagate(task):
    """The pass itself: run ready nodes until none is left."""
    # Locals, not attribute lookups, in the loop that runs once per node.
    ready, buffers, owned, deps = task.ready, task.buffers, task.owned, task.deps
    captures, results, accumulate = task.captures, task.results, task.accumulate
    retain_graph, create_graph = task.retain_graph, task.create_graph
    check_anomaly, observe, tiebreak = task.check_anomaly, task.observe, task.tiebreak
    # Gradients summed into arrays only this pass holds, in place: when no graph or tangent
    # of the sums is wanted, and anomaly mode and the profiler see every node's own result.
    in_place = (not create_graph and (dual_state is None or dual_state.level is None)
                and not check_anomaly and observe is None)
    # The last node a node made ready skips the heap when it is the only ready one (a chain
    # of layers): the heap would hand it straight back. Pushes keep the order nodes became
    # ready in, which orders the leaves.
    follow = None
    while follow is not None or ready:
        if follow is None:
            node = heapq.heappop(ready)[-1]
        else:
            node, follow = follow, None
        grads = buffers.pop(node, None)
        if grads is not None and node.pre_hooks:
            for nr, hooks in node.pre_hooks.items():
                if grads[nr] is not None:
                    grads[nr] = _run_tensor_hooks(hooks, grads[nr])
        if node in captures and grads is not None:
            for nr, pos in captures[node]:
                g = grads[nr]
                if g is not None and type(node) is AccumulateGrad and node.variable._hooks:
                    g = _run_tensor_hooks(node.variable._hooks, g)
                results[pos] = g
        if type(node) is AccumulateGrad:
            if accumulate and grads is not None and grads[0] is not None:
                leaf_args = (node.variable, grads[0], create_graph, owned.pop(node))
                if observe is None:
                    _accumulate_into_leaf(*leaf_args)
                else:
                    observe("AccumulateGrad", _accumulate_into_leaf, *leaf_args)
            continue
        input_grads = None
        if grads is not None and (grads[0] is not None or _any_gradient(grads)):
            if not (in_place and node.scatters and _scattered(node, grads, buffers, owned)):
                input_grads = (node.apply(grads) if observe is None
                               else observe(node.name(), node.apply, grads))
            if not retain_graph:
                node.release()  # its saved tensors are dead weight from here on
            if check_anomaly:
                _check_finite(node, input_grads)
        for i, edge in enumerate(node.next_edges):
            if edge is None:
                continue
            child, nr = edge
            waiting = deps.get(child)
            if waiting is None:
                continue
            g = input_grads[i] if input_grads is not None else None
            if g is not None:
                leaf = type(child) is AccumulateGrad
                # Fresh: no other gradient here is g's array or a view of it. Asked only where
                # it is used: a leaf may keep g as .grad; an in-place sum may write into g.
                fresh = ((leaf or in_place) and node.fresh_gradients
                         and _is_fresh(g, grads, input_grads[:i], input_grads[i + 1:]))
                if leaf:
                    _add_to_leaf_buffer(buffers, owned, child, g, fresh, in_place)
                else:
                    _add_to_buffer(buffers, owned, child, nr, g, fresh, in_place)
            deps[child] = waiting - 1
            if waiting == 1:
                if follow is not None:
                    heapq.heappush(ready, _ready_entry(follow, tiebreak))
                follow = child
        if follow is not None and ready:
            heapq.heappush(ready, _ready_entry(follow, tiebreak))
            follow = None
