"""The life of sharded modules through an iteration: hooks, prefetching, the root.

Every module `fully_shard` (or FullyShardedDataParallel) is applied to gets an `FSDPState`:
its `Unit` (the parameters it manages; none if its submodules took them all) and two hooks.
The first sharded module to run forward becomes the root: at that first forward it collects
the states below it into a `Root`, checks that every rank sharded the same modules (the
first collective: a rank that wrapped something else gets an error on every rank, naming
the unit), and from then on drives the iteration:

  forward pre-hook    all-gather the unit's parameters (waiting for the prefetch if one was
                      issued), put the full tensors into the module's attributes, and issue
                      the all-gather of the unit that ran next in the last forward (a
                      nonblocking collective: it moves while this unit computes).
  forward hook        put the shards back; free the full parameters if
                      reshard_after_forward (never the root's: its backward comes first);
                      hook the outputs, whose gradients mark the start of the unit's backward.
  output gradient     (pre-backward) the first one queues the end-of-backward callback
                      (engine.queue_callback, as DistributedDataParallel does); each unit
                      all-gathers its parameters again if they were freed, and issues the
                      gather of the unit whose backward comes next (the one before it in
                      forward order).
  gradient ready      (the unsharded parameters' post-accumulate hooks) when every
                      trainable parameter of a unit has its gradient, the units ready so far
                      start their reduce-scatters in reverse forward order (the same order on
                      every rank, whatever order their gradients finished in) and free
                      their full parameters. One reduction is in flight at a time: it moves
                      while the next unit's backward computes, and is finished (added into
                      the shards' `.grad`, its full-size buffer freed) before the next
                      starts, which bounds the memory to about one unit's gradients.
  end of backward     units whose gradients never all came (unused parameters) reduce zeros
                      for the missing ones, in order; every reduction is waited for (under
                      the watchdog, named after its unit) and added into the shards' `.grad`;
                      every unit is resharded.

With `set_requires_gradient_sync(False)` a unit skips the reduction: its unsharded gradients
stay on the unsharded parameters and accumulate until a backward with synchronization
reduces their sum (gradient accumulation, as in torch).

A backward that raises after it started drops the iteration on that rank: every shard's
`.grad` becomes None and the gathered parameters are freed, without waiting for anything
(the collectives in flight are kept, with their buffers, until MPI completes them, so MPI
never writes into freed memory). Raised on every rank alike (a bad batch seen by all), the
ranks stay in step and training can go on. Raised on some ranks only, the others wait in
collectives those ranks will not join: the exception, uncaught, aborts the job
(init_process_group's abort_on_exception), and otherwise the watchdog ends it at the group's
timeout, naming the unit waited for.
"""
import weakref
import zlib

import numpy as np

from ...autograd import engine, grad_mode
from ...tensor import Tensor


class FSDPState:
    def __init__(self, module, unit, comm, reshard_after_forward, mp_policy):
        self.module = module
        self.unit = unit
        self.comm = comm
        self.reshard_after_forward = reshard_after_forward
        self.mp_policy = mp_policy
        self.requires_gradient_sync = True
        self.root = None
        self.backward_started = False
        self.ready = False
        ref = weakref.ref(self)
        self._handles = [module.register_forward_pre_hook(_pre_forward_hook(ref)),
                         module.register_forward_hook(_post_forward_hook(ref))]
        if unit is not None:
            self._handles += [p.full.register_post_accumulate_grad_hook(_grad_hook(ref, p))
                              for p in unit.trainable]
        object.__setattr__(module, "_fsdp_state", self)

    @property
    def is_root(self):
        return self.root is not None and self.root.state is self

    # ------------------------------------------------------------------ forward
    def pre_forward(self, args):
        if self.root is None:
            Root(self)
        root = self.root
        if root.backward_running:
            # A forward run again inside backward (activation checkpointing's recomputation):
            # the unit is needed as it is, the iteration's order and hooks stay as they are.
            if self.unit is not None:
                self.unit.unshard()
                self.unit.use_full()
            return None
        if self.is_root:
            root.begin_forward()
        if self.unit is not None:
            position = len(root.order)
            root.order.append(self)
            self.unit.unshard()
            self.unit.use_full()
            root.prefetch_forward(position)
        policy = self.mp_policy
        if policy is not None and policy.param_dtype is not None and policy.cast_forward_inputs:
            return _cast(args, policy.param_dtype)
        return None

    def post_forward(self, output):
        root = self.root
        if root.backward_running:
            if self.unit is not None:
                self.unit.use_shards()
            return None
        if self.unit is not None:
            self.unit.use_shards()
            if self.reshard_after_forward and not self.is_root:
                self.unit.reshard()
        if grad_mode.is_grad_enabled():
            for t in _tensors_in(output):
                if t.requires_grad:
                    t.register_hook(_pre_backward_hook(weakref.ref(self)))
        if self.is_root:
            root.end_forward()
        policy = self.mp_policy
        if policy is not None and policy.output_dtype is not None:
            return _cast(output, policy.output_dtype)
        return None

    # ------------------------------------------------------------------ backward
    def pre_backward(self):
        root = self.root
        if root is None:
            return
        if not root.backward_running:
            root.start_backward()
        if self.backward_started:
            return
        self.backward_started = True
        if self.unit is not None:
            self.unit.unshard()
            root.prefetch_backward(self)

    def on_gradient(self, param):
        root = self.root
        if root is None or not root.backward_running:
            return
        param.grad_ready = True
        if not self.ready and self.unit.all_grads_ready():
            self.ready = True
            root.launch_ready()


class Root:
    """The states under the root module and the iteration they run (module docstring)."""

    def __init__(self, state):
        self.state = state
        self.states = []
        for path, module in state.module.named_modules():
            sub = getattr(module, "_fsdp_state", None)
            if sub is not None:
                self.states.append(sub)
                if sub.unit is not None:  # named where the watchdog and errors show it
                    sub.unit.name = f"unit '{path}'" if path else "the root unit"
        for s in self.states:
            if s.root is not None:
                raise RuntimeError(
                    f"FSDP: {type(s.module).__name__} was already run as part of another "
                    f"root's forward; call the outermost sharded module (apply fully_shard to "
                    f"the model itself last, and call the model)")
        _check_same_units(state.comm, self.states)
        for s in self.states:
            s.root = self
        self.order = []           # states with units, in this forward's order
        self.last_order = []      # the previous forward's, which prefetching follows
        self.reduce_order = []
        self.next_reduce = 0
        self.in_flight = []
        self.backward_running = False
        self.abandoned = []       # Works of a failed backward, kept while MPI uses them

    # forward ---------------------------------------------------------------------------
    def begin_forward(self):
        if self.order:
            self.last_order = self.order
        self.order = []
        for s in self.states:  # a forward with no backward left these gathered: refresh
            if s.unit is not None and s.unit.unsharded:
                s.unit.reshard()
        self.abandoned = [work for work in self.abandoned if not work.done()]

    def prefetch_forward(self, position):
        last = self.last_order
        if position + 1 < len(last) and last[position] is self.order[position]:
            last[position + 1].unit.start_unshard()

    def end_forward(self):
        used = {id(s) for s in self.order}
        for s in self.last_order:  # a prefetched unit the forward did not run after all
            if id(s) not in used and s.unit._gather is not None:
                s.unit.reshard()
        if not grad_mode.is_grad_enabled():
            for s in self.order:
                s.unit.reshard()

    # backward --------------------------------------------------------------------------
    def start_backward(self):
        self.backward_running = True
        engine.queue_callback(self.finalize, on_error=self.fail)
        seen, order = set(), []
        for s in reversed(self.order):
            if id(s) not in seen:
                seen.add(id(s))
                order.append(s)
        self.backward_order = order
        self.reduce_order = [s for s in order if s.unit.trainable]
        self.next_reduce = 0

    def prefetch_backward(self, state):
        order = self.backward_order
        for k, s in enumerate(order):
            if s is state:
                if k + 1 < len(order) and not order[k + 1].backward_started:
                    order[k + 1].unit.start_unshard()
                return

    def launch_ready(self, force=False):
        """Start the reductions of the units whose gradients are complete, in reduce order,
        stopping at the first that is not (unless `force`: the end of backward)."""
        while self.next_reduce < len(self.reduce_order):
            s = self.reduce_order[self.next_reduce]
            if not (s.ready or force):
                break
            if s.requires_gradient_sync:
                # One reduction in flight at a time (it overlaps the next unit's backward):
                # each holds a full unit's gradients, so more would undo the sharding.
                while self.in_flight:
                    self.in_flight.pop(0).unit.finish_reduce()
                s.unit.start_reduce()
                self.in_flight.append(s)
            s.unit.reshard()
            self.next_reduce += 1
        self.in_flight = [s for s in self.in_flight if not s.unit.progress()]

    def finalize(self):
        try:
            self.launch_ready(force=True)
            for s in self.in_flight:
                s.unit.finish_reduce()
            self.in_flight = []
            for s in self.states:
                if s.unit is not None:
                    s.unit.reshard()
        finally:
            self._reset()

    def fail(self, error):
        """The backward raised after it started: drop the iteration (every shard's `.grad`
        becomes None, as DistributedDataParallel does, since some units were reduced and
        others not), without waiting for anything, and let the error propagate."""
        for s in self.states:
            if s.unit is not None:
                self.abandoned += s.unit.abandon()
                for p in s.unit.params:
                    p.shard.grad = None
        self.in_flight = []
        self._reset()

    def _reset(self):
        self.backward_running = False
        for s in self.states:
            s.backward_started = s.ready = False
            if s.unit is not None:
                for p in s.unit.params:
                    p.grad_ready = False


def _check_same_units(comm, states):
    """Every rank must shard the same modules the same way: compared at the root's first
    forward, before the first all-gather, with the same error on every rank."""
    layout = [(s.unit.name if s.unit else None,
               [(p.shape, str(p.shard.dtype), p.requires_grad) for p in s.unit.params]
               if s.unit else [],
               (s.comm.size, s.unit.replicate.size if s.unit and s.unit.replicate else 1))
              for s in states]
    # Names are described but not compared: only what the collectives move must agree.
    shapes = repr([(units, size) for _, units, size in layout]).encode()
    if comm.agree([len(states), zlib.crc32(shapes)], "the check that every rank sharded the "
                  "same modules"):
        return
    everyone = comm.allgather_object(layout, "gathering the sharded modules' descriptions")
    raise RuntimeError(_mismatch_message(everyone, comm.process_group.ranks))


def _mismatch_message(layouts, ranks):
    head = ("FSDP: the ranks sharded different modules (fully_shard / FullyShardedDataParallel "
            "must be applied to the same model, the same way, on every rank); nothing was "
            "gathered.\n")
    for k in range(max(len(x) for x in layouts)):
        seen = {}
        for r, layout in zip(ranks, layouts):
            entry = layout[k] if k < len(layout) else None
            key = repr(entry[1:]) if entry is not None else "no such unit"
            seen.setdefault(key, (entry, []))[1].append(r)
        if len(seen) > 1:
            lines = []
            for entry, where in seen.values():
                if entry is None:
                    lines.append(f"  ranks {where}: no unit {k}")
                else:
                    shapes = [shape for shape, _, _ in entry[1]]
                    lines.append(f"  ranks {where}: unit {k} '{entry[0]}' with {len(shapes)} "
                                 f"parameters of shapes {shapes[:6]}"
                                 f"{' ...' if len(shapes) > 6 else ''}, sharded over "
                                 f"{entry[2][0]} ranks x {entry[2][1]} replicas")
            return head + f"The first difference is unit {k}:\n" + "\n".join(lines)
    return head + f"The units' layouts differ (number of units per rank: " \
                  f"{[len(x) for x in layouts]})"


def _pre_forward_hook(ref):
    def hook(module, args):
        return ref().pre_forward(args)
    return hook


def _post_forward_hook(ref):
    def hook(module, args, output):
        return ref().post_forward(output)
    return hook


def _pre_backward_hook(ref):
    def hook(grad):
        state = ref()
        if state is not None:
            state.pre_backward()
        return None
    return hook


def _grad_hook(ref, param):
    def hook(tensor):
        state = ref()
        if state is not None:
            state.on_gradient(param)
    return hook


def _tensors_in(obj):
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors_in(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors_in(x)


def _cast(obj, dtype):
    """Floating tensors in `obj` (nested tuples, lists, dicts) cast to `dtype`."""
    if isinstance(obj, Tensor):
        return obj.to(dtype) if obj.is_floating_point() and obj.dtype != np.dtype(dtype) else obj
    if isinstance(obj, tuple):
        return tuple(_cast(x, dtype) for x in obj)
    if isinstance(obj, list):
        return [_cast(x, dtype) for x in obj]
    if isinstance(obj, dict):
        return {k: _cast(v, dtype) for k, v in obj.items()}
    return obj
