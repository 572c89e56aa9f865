"""The Reducer: averages gradients across ranks while backward is still running.

Lifecycle, once per synchronized iteration:

  prepare_for_backward(outputs)  (DistributedDataParallel.forward) arms the reducer, hooks the
                                 outputs so the end-of-backward callback is queued as soon as
                                 backward starts, and, with find_unused_parameters, walks the
                                 graph from the outputs to find parameters it cannot reach.
  _enter_backward()              (the outputs' gradient hook, or the first parameter's,
                                 whichever runs first) starts the backward, once:
                                 queues `_finalize` with the engine.
  _mark_ready(i)                 (parameter i's post-accumulate hook) divides the gradient by
                                 the world size into its bucket (in place, for a large
                                 parameter: see below); when a bucket is full, launches it,
                                 and every bucket before it that is full, in bucket order;
                                 tests outstanding reductions so MPI progresses them while
                                 backward goes on.
  _finalize()                    (end of backward) agrees with the other ranks that everyone
                                 launched every bucket (one tiny blocking Allreduce on the
                                 channel's control communicator), waits for the reductions
                                 (under the process group's watchdog), and writes
                                 the averages into `.grad` (or leaves `.grad` a view of the
                                 bucket, with gradient_as_bucket_view). After the first
                                 iteration the buckets are rebuilt in the order gradients
                                 became ready on rank 0, the same layout on every rank.

Buckets hold parameters of one dtype. The first is at most 1 MB so that the first reduction
starts early; the others at most `bucket_cap_bytes`. Buckets are launched in the order they
fill (that of their last parameter in the expected ready order), so each can go as soon as
it is full.

Large parameters are reduced in place. The rule: a parameter of at least the first bucket's
cap (1 MiB, or `bucket_cap_bytes` if smaller) is a bucket by itself, and that bucket has no
storage of its own: its buffer is the parameter's `.grad` array, divided by the world size
and reduced where the engine left it, so that gradient is neither copied into a bucket nor
copied back (`_finalize` has nothing to write, unless a comm hook returned another array).
At 1 MiB a message is bandwidth-bound, so sending it alone costs next to nothing, while the
two copies cost two passes over its memory. The smaller parameters fill buckets around it.
When a rank's `.grad` array cannot be used (not C-contiguous, another shape or dtype,
read-only, recorded with create_graph, or no gradient this iteration) that rank copies into a
private array of the same size instead: the layout, the bytes reduced and their order are
the same on every rank either way.

Where ranks share a host, DDP gives the Reducer `shared` buckets (SharedBuckets, in
algorithms/ddp_comm_hooks/shared_memory.py) and the buckets' storage is there instead: no
bucket is in place (the gradient has to reach memory the other ranks can read, and dividing
it into the bucket is that copy), and `.grad` is left a view of the bucket afterwards, as with
gradient_as_bucket_view. A comm hook the user registers gets private buckets back. Before
the bucket layout is rebuilt, or Join's shadow iterations reduce zeros through the buckets,
`.grad` views of them are given arrays of their own.

When ranks disagree (a parameter got no gradient on some rank, so its bucket never filled),
nobody waits forever: the agreement step sees it, every rank launches the buckets it still
owes (zeros where gradients are missing) so all reductions complete, and every rank raises the
same error naming the parameters and the ranks.

A backward that raises on one rank once it has started (a hook or an op failed, maybe after
some buckets were launched) is settled inside that same backward: the engine runs the
Reducer's on-error callback (`_fail`) instead of `_finalize`, which joins the agreement the
other ranks are in, saying it failed. Every rank then completes the reductions (MPI never
keeps a buffer that is reused), drops the iteration's gradients (every `.grad` becomes None,
so an optimizer step changes nothing and the ranks' parameters stay equal) and raises from
that iteration's `loss.backward()`, every rank the same error (on the failing rank, caused
by its own exception). Whatever the user does next (catch and step, catch and go on), the
ranks stay in step. Should a backward still end without either callback (it never reached DDP's
outputs' hook), the next forward on that rank settles it before any other collective
(`settle_previous_iteration`), and `shadow_iteration` refuses to run over it.

The Reducer talks MPI only through its `Channel` (channel.py): the process group and DDP's
duplicates of its communicator. Every blocking wait runs under the group's watchdog, so a
peer that died or stopped mid-backward ends the job after the group's timeout, with a
message naming the operation, instead of a hang. Each bucket is reduced by the comm hook
(bucket.py: `GradBucket` and the contract; DDP gives the default hook and its state). Hooks
that reduce in several rounds keep them in launch order in the Reducer's `rounds_in_flight`
(see algorithms/ddp_comm_hooks/rounds.py).
"""
import time
import weakref

import numpy as np

from ...autograd import engine
from ...autograd.graph import AccumulateGrad, reachable
from ...tensor import Tensor
from .bucket import GradBucket

FIRST_BUCKET_BYTES = 1 << 20


class _Bucket:
    """Parameters reduced as one flat array, `buffer`; `views` are its pieces shaped like the
    parameters. An `in_place` bucket (one large parameter) points `buffer` at the gradient
    array itself each iteration, or at storage of its own (allocated on first need)."""
    __slots__ = ("index", "members", "in_place", "dtype", "size", "nbytes", "_shapes",
                 "_storage", "buffer", "views", "pending", "future", "first_ready",
                 "last_ready", "launched", "completed")

    def __init__(self, index, members, params, in_place):
        self.index = index
        self.members = members
        self.in_place = in_place
        self.dtype = params[members[0]]._array.dtype
        self._shapes = [params[i].shape for i in members]
        self.size = sum(params[i]._array.size for i in members)
        self.nbytes = self.size * self.dtype.itemsize
        self._storage = None
        self.reset()

    def use_storage(self, array=None):
        """Reduce the bucket's own array: `array` from now on if given, else one allocated
        (zero-filled) on first use."""
        if array is not None or self._storage is None:
            buffer = np.zeros(self.size, self.dtype) if array is None else array
            views, offset = [], 0
            for shape in self._shapes:
                n = int(np.prod(shape))
                views.append(buffer[offset:offset + n].reshape(shape))
                offset += n
            self._storage = buffer, views
        self.buffer, self.views = self._storage

    def use_array(self, array):
        """Reduce `array` (the gradient of the bucket's one parameter) where it is."""
        self.buffer, self.views = array.reshape(-1), [array]

    def reset(self):
        self.pending = len(self.members)
        self.future = None
        self.first_ready = self.last_ready = self.launched = self.completed = None
        if self.in_place:
            self.buffer = self.views = None
        else:
            self.use_storage()


def reducible_in_place(grad, param):
    """Whether `param`'s gradient tensor can serve as its bucket's buffer: an array of the
    parameter's shape and dtype, C-contiguous (so `reshape(-1)` is a view) and writable, in a
    tensor outside any graph (not recorded with create_graph)."""
    array = grad._array
    return (array.shape == param.shape and array.dtype == param._array.dtype
            and array.flags.c_contiguous and array.flags.writeable
            and not grad.requires_grad)


def assign_buckets(params, order, cap_bytes, first_cap_bytes):
    """Group parameter indices, taken in `order`, into buckets of one dtype each.

    A parameter of at least `first_cap_bytes` is a bucket by itself. The others fill the open
    bucket of their dtype up to its cap: `first_cap_bytes` for the first of a dtype,
    `cap_bytes` after. Buckets are returned in the order they fill (that of their last
    parameter in `order`) so that, launched in that order, each can go as soon as it is full."""
    buckets = []       # member lists, in the order they were opened
    last = []          # position in `order` of each bucket's last member
    open_bucket = {}   # dtype -> (bucket number, bytes so far, cap)
    for pos, i in enumerate(order):
        data = params[i]._array
        if data.nbytes >= first_cap_bytes:
            buckets.append([i])
            last.append(pos)
            continue
        k, size, cap = open_bucket.get(data.dtype, (None, 0, first_cap_bytes))
        if k is None or size + data.nbytes > cap:
            k, size, cap = len(buckets), 0, (first_cap_bytes if k is None else cap_bytes)
            buckets.append([])
            last.append(pos)
        buckets[k].append(i)
        last[k] = pos
        open_bucket[data.dtype] = (k, size + data.nbytes, cap)
    return [buckets[k] for k in sorted(range(len(buckets)), key=last.__getitem__)]


class Reducer:
    """Averages the gradients of `params` (named `names`, for messages) over the ranks of
    `channel.process_group`; see the module docstring for its lifecycle."""

    def __init__(self, params, names, channel, bucket_cap_bytes, comm_hook,
                 find_unused_parameters=False, gradient_as_bucket_view=False,
                 first_bucket_bytes=FIRST_BUCKET_BYTES, timeline=None, shared=None):
        self.params = list(params)
        self.names = list(names)
        self.channel = channel
        self.world_size = channel.world_size
        self.rank = channel.rank
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.shared = shared
        # In shared memory `.grad` stays a view of the rank's own region: copying the
        # reduced bucket back would be one more pass over every gradient.
        self._grads_as_views = gradient_as_bucket_view or shared is not None
        self.bucket_cap_bytes = bucket_cap_bytes
        self.first_bucket_bytes = min(first_bucket_bytes, bucket_cap_bytes)
        self.timeline = timeline
        self._comm_hook = comm_hook  # (state, hook): DDP's default until one is registered
        self._hook_registered = False
        self.rounds_in_flight = []
        self._scale = 1.0 / self.world_size
        self._ready = np.zeros(len(self.params), np.bool_)
        self._used = np.zeros(len(self.params), np.bool_)
        self._armed = False
        self._finalize_queued = False
        self._next_launch = 0
        self._in_flight = []
        self._ready_order = []
        self._unused = ()
        self.iteration = 0
        self.rebuilt = False
        self.last_step = None
        self._build(list(reversed(range(len(self.params)))))
        handles = [p.register_post_accumulate_grad_hook(_ready_hook(weakref.ref(self), i))
                   for i, p in enumerate(self.params)]
        # The hooks hold the reducer weakly; once it is gone (the DDP wrapper was dropped, or
        # the model re-wrapped) they are taken off the parameters.
        weakref.finalize(self, _remove_all, handles)

    # ------------------------------------------------------------------ layout
    def _build(self, order):
        groups = assign_buckets(self.params, order, self.bucket_cap_bytes,
                                self.first_bucket_bytes)
        self._detach_shared_grads()
        self.buckets = []
        self._bucket_of = [None] * len(self.params)
        self._slot_of = [None] * len(self.params)
        for k, members in enumerate(groups):
            in_place = (self.shared is None and len(members) == 1 and
                        self.params[members[0]]._array.nbytes >= self.first_bucket_bytes)
            bucket = _Bucket(k, members, self.params, in_place)
            self.buckets.append(bucket)
            for slot, i in enumerate(members):
                self._bucket_of[i] = bucket
                self._slot_of[i] = slot
        # What the hook gets, the same object at every launch. Kept here, not on the buckets,
        # which it points to: no cycle keeps a dropped wrapper's channel alive.
        self._grad_buckets = [GradBucket(bucket, self) for bucket in self.buckets]
        if self.shared is not None:
            arrays = self.shared.storage([(b.dtype, b.size) for b in self.buckets])
            for bucket, array in zip(self.buckets, arrays):
                bucket.use_storage(array)
        if self._grads_as_views:
            for i, p in enumerate(self.params):
                bucket = self._bucket_of[i]
                if p.grad is not None and not bucket.in_place:
                    view = bucket.views[self._slot_of[i]]
                    np.copyto(view, p.grad._array)
                    p.grad = Tensor.wrap(view)

    def bucket_layout(self):
        """The parameter indices of each bucket, in launch order."""
        return [list(b.members) for b in self.buckets]

    def _rebuild(self):
        """Lay the buckets out in the order gradients became ready on rank 0."""
        seen = set(self._ready_order)
        order = self._ready_order + [i for i in reversed(range(len(self.params)))
                                     if i not in seen]
        order = np.array(order, np.int64)
        self.channel.broadcast_arrays([order], 0, "the bucket rebuild (rank 0's ready order)")
        self._build(order.tolist())
        self.rebuilt = True

    def register_comm_hook(self, state, hook):
        if self._hook_registered:
            raise RuntimeError("register_comm_hook can only be called once")
        if not callable(hook):
            raise TypeError(f"hook must be callable as hook(state, bucket), got {hook!r}")
        self._comm_hook = (state, hook)
        self._hook_registered = True
        if self.shared is not None:
            # The shared buckets serve the default hook only; a hook of the user's runs on
            # private buckets, with large gradients reduced in place again.
            self._detach_shared_grads()
            self.shared.close()  # now, at the same point on every rank
            self.shared = None
            self._grads_as_views = self.gradient_as_bucket_view
            self._build([i for bucket in self.buckets for i in bucket.members])

    # ------------------------------------------------------------------ lifecycle
    def settle_previous_iteration(self):
        """Called first by every forward: if the last backward started but never finished
        here (it raised), settle it with the other ranks (see `_abandon`), which raises."""
        if self._finalize_queued:
            self._abandon()

    def prepare_for_backward(self, outputs):
        self._reset_iteration()
        self._armed = True
        roots = [t for t in _tensors_in(outputs) if t.requires_grad]
        for t in roots:
            if t.grad_fn is not None:
                t.register_hook(self._on_backward_start)
        if self.find_unused_parameters:
            nodes = reachable([t.grad_fn for t in roots if t.grad_fn is not None])
            reached = {id(n.variable) for n in nodes if type(n) is AccumulateGrad}
            reached.update(id(t) for t in roots if t.grad_fn is None)
            self._unused = [i for i, p in enumerate(self.params) if id(p) not in reached]

    def _on_backward_start(self, grad):
        self._enter_backward()
        return None  # the output's gradient goes on unchanged

    def _on_gradient(self, i):
        if self._enter_backward():
            self._mark_ready(i)

    def _enter_backward(self):
        """The one door into an iteration's backward, from whichever hook runs first (the
        outputs' gradient hook, or a parameter's gradient when backward did not pass the
        outputs): queues `_finalize` with the engine and marks the parameters found unused,
        once per armed iteration. Returns whether an iteration is running (DDP's forward
        armed the reducer; not under no_sync)."""
        if not self._armed:
            return False
        if not self._finalize_queued:
            self._finalize_queued = True
            self._backward_start = time.perf_counter()
            engine.queue_callback(self._finalize, on_error=self._fail)
            for i in self._unused:
                if not self._ready[i]:
                    self._mark_ready(i, used=False)
        return True

    def _mark_ready(self, i, used=True):
        if self._ready[i]:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {i} ('{self.names[i]}') received its "
                f"gradient twice in one backward pass (a second backward through the same "
                f"forward, or, with find_unused_parameters=True, a use of the parameter that "
                f"does not go through the model's output). Run one backward per forward.")
        now = time.perf_counter()
        bucket = self._bucket_of[i]
        param = self.params[i]
        if used:
            grad = param.grad._array
            if bucket.in_place:
                if reducible_in_place(param.grad, param):
                    bucket.use_array(grad)
                else:
                    bucket.use_storage()
            view = bucket.views[self._slot_of[i]]
            if grad is view:
                if self._scale != 1.0:
                    np.multiply(view, self._scale, out=view)
            else:
                np.multiply(grad, self._scale, out=view)
                if self._grads_as_views:
                    param.grad = Tensor.wrap(view)
            self._used[i] = True
            if not self.rebuilt:
                self._ready_order.append(i)
        else:
            self._zero_slot(i)
        self._ready[i] = True
        if bucket.first_ready is None:
            bucket.first_ready = now
        bucket.last_ready = now
        bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_full_buckets()
        self._progress()

    def _detach_shared_grads(self):
        """Give every `.grad` that is a view of the shared buckets an array of its own, before
        those bytes are laid out anew (the rebuild) or reduced without this rank's gradients
        (Join's shadow iterations)."""
        if self.shared is None:
            return
        for param in self.params:
            if param.grad is not None and self.shared.holds(param.grad._array):
                param.grad = Tensor.wrap(param.grad._array.copy())

    def _zero_slot(self, i):
        """Parameter i takes part in its bucket's reduction with zeros."""
        bucket = self._bucket_of[i]
        if bucket.in_place:
            bucket.use_storage()
        bucket.views[self._slot_of[i]].fill(0)

    def _launch_full_buckets(self):
        while self._next_launch < len(self.buckets):
            bucket = self.buckets[self._next_launch]
            if bucket.pending:
                return
            self._launch(bucket)

    def _launch(self, bucket):
        state, hook = self._comm_hook
        bucket.launched = time.perf_counter()
        bucket.future = hook(state, self._grad_buckets[bucket.index])
        self._in_flight.append(bucket)
        self._next_launch += 1

    def _progress(self):
        """Let MPI progress what is in flight; note when each reduction completes."""
        if not self._in_flight:
            return
        still = []
        for bucket in self._in_flight:
            if bucket.future.done():
                bucket.completed = time.perf_counter()
            else:
                still.append(bucket)
        self._in_flight = still

    def _finalize(self):
        backward_end = time.perf_counter()
        try:
            if self.find_unused_parameters:
                for i in np.flatnonzero(~self._ready):
                    self._mark_ready(int(i), used=False)
            globally_used = self._agree(self._next_launch, self._used)
            wait_start = time.perf_counter()
            for bucket in self.buckets:
                result = self._wait(bucket)
                if bucket.completed is None:
                    bucket.completed = time.perf_counter()
                if result is not bucket.buffer:
                    np.copyto(bucket.buffer, result)
            wait_seconds = time.perf_counter() - wait_start
            self._unpack(globally_used)
            self._record(backward_end, wait_seconds)
            if not self.rebuilt and not self.find_unused_parameters:
                self._rebuild()
            self.iteration += 1
        finally:
            self._reset_iteration()

    def _wait(self, bucket):
        """The value of bucket's Future, waited for under the watchdog (a hook may return any
        Future, not only a Work that watches itself)."""
        with self.channel.blocked(f"waiting for the reduction of bucket {bucket.index}"):
            return bucket.future.wait()

    def _fail(self, error):
        """The backward pass raised here (a hook, a node, a mark_ready) after it started: the
        engine calls this instead of `_finalize`. Settle the iteration now, as the rank that
        failed, so that every rank raises the same error from this same `backward()` (here
        caused by `error`) and drops the iteration's gradients: ranks whose scripts catch by
        type still take the same path."""
        try:
            self._abandon()
        except RuntimeError as settled:
            raise settled from error

    def _abandon(self):
        """The last backward started (buckets may be in flight) but never finished on this
        rank: it raised. Take part in the agreement the other ranks are waiting in, as the
        rank that failed, which completes every reduction and raises on every rank."""
        try:
            self._agree(self._next_launch, self._used, failed=True)
        finally:
            self._reset_iteration()

    def _agree(self, launched, used, failed=False):
        """Blocking agreement on the control communicator that every rank launched every
        bucket and none failed. Returns the parameters used on some rank (with
        find_unused_parameters). Otherwise completes every outstanding reduction and raises
        on every rank."""
        n = len(self.buckets)
        vec = np.empty(3 + (len(used) if self.find_unused_parameters else 0), np.int64)
        vec[0], vec[1], vec[2] = launched, -launched, failed
        if self.find_unused_parameters:
            vec[3:] = used
        self.channel.allreduce_max(vec, "the end-of-backward agreement on launched buckets")
        if vec[0] == n and -vec[1] == n and not vec[2]:
            return vec[3:].astype(bool) if self.find_unused_parameters else None
        # Someone is short or failed: owe no reduction to anyone, then explain.
        for i in np.flatnonzero(~self._ready):
            self._zero_slot(i)
        for bucket in self.buckets:
            bucket.pending = 0
        self._launch_full_buckets()
        for bucket in self.buckets:
            self._wait(bucket)
        state = np.concatenate([[failed], self._ready]).astype(np.uint8)
        states = self.channel.allgather(state, "gathering which parameters got a gradient")
        if states[:, 0].any():
            for param in self.params:
                param.grad = None
            raise RuntimeError(_failed_message(np.flatnonzero(states[:, 0]).tolist(),
                                               self.iteration))
        raise RuntimeError(_unready_message(states[:, 1:], self.names, self.params))

    def _unpack(self, globally_used):
        for i, param in enumerate(self.params):
            if globally_used is not None and not globally_used[i]:
                continue
            view = self._bucket_of[i].views[self._slot_of[i]]
            grad = param.grad
            if grad is not None and grad._array is view:  # reduced in place
                grad.mark_written()
            elif self._grads_as_views:
                param.grad = Tensor.wrap(view)
            elif grad is None or grad.shape != view.shape or not grad._array.flags.writeable:
                param.grad = Tensor.wrap(view.copy())
            else:
                with grad.writing() as data:
                    np.copyto(data, view)

    def _record(self, backward_end, wait_seconds):
        end = time.perf_counter()
        buckets = [{"index": b.index, "nbytes": b.nbytes,
                    "params": [self.names[i] for i in b.members],
                    "ready": (b.first_ready, b.last_ready), "launched": b.launched,
                    "completed": b.completed} for b in self.buckets]
        backward = (self._backward_start, backward_end)
        self.last_step = {"backward": backward, "buckets": buckets, "end": end,
                          "wait_seconds": wait_seconds}
        if self.timeline is not None:
            self.timeline.record_step(self.iteration, backward, buckets, end, wait_seconds)

    def _reset_iteration(self):
        if not self.rebuilt:
            self._ready_order = []  # an iteration that failed leaves no half-recorded order
        self._armed = False
        self._finalize_queued = False
        self._ready[:] = False
        self._used[:] = False
        self._next_launch = 0
        self._in_flight = []
        self._unused = ()
        for bucket in self.buckets:
            bucket.reset()

    # ------------------------------------------------------------------ join
    def shadow_iteration(self):
        """What a rank that has run out of data does for one iteration of the others: reduce
        zero-filled buckets in the same order and take part in the agreement (and in the
        first iteration's rebuild), so their collectives complete. `.grad` is not touched."""
        if self._finalize_queued or self._next_launch:
            # Resetting would zero-fill buckets that MPI requests still read and write.
            raise RuntimeError(
                "DistributedDataParallel: Join's shadow iteration started while this rank's "
                "last backward pass is unfinished (it raised before DDP could settle it, and "
                "reductions may still be in flight). Run a forward of the model to settle it "
                "with the other ranks, or let the exception propagate.")
        self._reset_iteration()
        self._detach_shared_grads()
        for bucket in self.buckets:
            bucket.use_storage()
            bucket.buffer.fill(0)
            bucket.pending = 0
        self._launch_full_buckets()
        try:
            self._ready[:] = True
            self._agree(len(self.buckets), self._used)
            for bucket in self.buckets:
                self._wait(bucket)
            if not self.rebuilt and not self.find_unused_parameters:
                self._rebuild()
        finally:
            self._reset_iteration()


def _ready_hook(reducer_ref, i):
    def hook(param):
        reducer = reducer_ref()
        if reducer is not None:
            reducer._on_gradient(i)
    return hook


def _remove_all(handles):
    for handle in handles:
        handle.remove()


def _failed_message(ranks, iteration):
    return (f"DistributedDataParallel: the backward pass of iteration {iteration} did not "
            f"finish on rank(s) {ranks}: it raised an exception there. Expected to have "
            f"finished reduction in this iteration (as PyTorch puts it, in the prior iteration "
            f"before starting a new one). The iteration's gradients were incomplete, so every "
            f"rank dropped them (every parameter's .grad is None; an optimizer step now changes "
            f"nothing) and the parameters are still the same on all ranks. Let exceptions "
            f"inside backward propagate (an uncaught one aborts the whole job), or decide to "
            f"skip a batch on every rank alike, before backward (all_reduce a flag).")


def _unready_message(masks, names, params):
    world = masks.shape[0]
    lines = []
    for i in range(masks.shape[1]):
        missing = [r for r in range(world) if not masks[r, i]]
        if missing:
            where = "all ranks" if len(missing) == world else f"rank(s) {missing}"
            lines.append(f"  parameter {i} '{names[i]}' (shape {tuple(params[i].shape)}) got "
                         f"no gradient on {where}")
    shown = "\n".join(lines[:20]) + ("\n  ..." if len(lines) > 20 else "")
    return ("DistributedDataParallel: backward finished, but some parameters received no "
            "gradient, so their buckets could not be reduced:\n" + shown + "\n"
            "Every parameter must take part in computing the output on every rank. If some "
            "parameters are legitimately unused in some iterations, construct "
            "DistributedDataParallel with find_unused_parameters=True. If the output does not "
            "depend on a parameter at all, freeze it (requires_grad_(False)) before wrapping.")


def _tensors_in(obj):
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors_in(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors_in(x)
