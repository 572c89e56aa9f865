"""The Reducer: averages gradients across ranks while backward is still running.

Lifecycle, once per synchronized iteration:

  prepare_for_backward(outputs)  (DistributedDataParallel.forward) arms the reducer, hooks the
                                 outputs so the end-of-backward callback is queued as soon as
                                 backward starts, and, with find_unused_parameters, walks the
                                 graph from the outputs to find parameters it cannot reach.
  _mark_ready(i)                 (parameter i's post-accumulate hook) copies the gradient into
                                 its bucket divided by the world size; when a bucket is full,
                                 launches it, and every bucket before it that is full, in
                                 bucket order; tests outstanding reductions so MPI progresses
                                 them while backward goes on.
  _finalize()                    (end of backward) agrees with the other ranks that everyone
                                 launched every bucket (one tiny blocking Allreduce on a
                                 control communicator), waits for the reductions, and writes
                                 the averages into `.grad` (or leaves `.grad` a view of the
                                 bucket, with gradient_as_bucket_view). After the first
                                 iteration the buckets are rebuilt in the order gradients
                                 became ready on rank 0, the same layout on every rank.

Buckets hold parameters of one dtype. The first is at most 1 MB so that the first reduction
starts early; the others at most `bucket_cap_bytes`. A parameter larger than a cap gets a
bucket of its own.

When ranks disagree (a parameter got no gradient on some rank, so its bucket never filled),
nobody waits forever: the agreement step sees it, every rank launches the buckets it still
owes (zeros where gradients are missing) so all reductions complete, and every rank raises the
same error naming the parameters and the ranks.
"""
import os
import threading
import time

import numpy as np
from mpi4py import MPI

from ..autograd import engine
from ..autograd.graph import AccumulateGrad
from ..tensor import Tensor
from .algorithms.ddp_comm_hooks import GradBucket, allreduce_hook

FIRST_BUCKET_BYTES = 1 << 20
PROGRESS_ENV = "MPIGRAD_DDP_PROGRESS_US"


class _ProgressPoller:
    """Pokes MPI's progress engine from a helper thread while reductions are in flight.

    MPI generally progresses nonblocking collectives only inside MPI calls. The gradient
    hooks make such calls, but they come in bursts (a layer's weight and bias together) with
    long matrix products between them, during which a reduction would otherwise sit still.
    numpy releases the GIL in those products, so this thread can call MPI_Iprobe (which
    only drives progress: nothing is ever sent on its communicator) every `interval`
    seconds. It never touches the requests themselves: only the main thread tests or waits
    on them. Needs MPI_THREAD_MULTIPLE (mpi4py's default); otherwise it is not started.

    Off by default (MPIGRAD_DDP_PROGRESS_US=0): on 2 oversubscribed cores it showed no gain
    (jobs/bench_ddp.py), since the thread competes with compute for the same core. Set e.g.
    MPIGRAD_DDP_PROGRESS_US=500 where each rank has a spare hardware thread.
    """

    def __init__(self, comm, interval):
        self.comm = comm
        self.interval = interval
        self._wake = threading.Event()
        self._active = False
        self._thread = None

    def start(self):
        self._active = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mpigrad-ddp-progress",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self):
        self._active = False
        self._wake.clear()

    def _run(self):
        while True:
            self._wake.wait()
            while self._active:
                self.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
                time.sleep(self.interval)


def _progress_interval():
    """Seconds between progress pokes from MPIGRAD_DDP_PROGRESS_US (0 turns the thread off)."""
    raw = os.environ.get(PROGRESS_ENV, "0")
    try:
        micros = float(raw)
    except ValueError:
        raise ValueError(f"{PROGRESS_ENV}={raw!r}: expected microseconds (0 turns the progress "
                         f"thread off)") from None
    if micros <= 0 or MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        return None
    return micros * 1e-6


class _Bucket:
    __slots__ = ("index", "members", "buffer", "views", "pending", "future", "first_ready",
                 "last_ready", "launched", "completed")

    def __init__(self, index, members, dtype, params):
        self.index = index
        self.members = members
        total = sum(params[i].data.size for i in members)
        self.buffer = np.zeros(total, dtype)
        self.views = []
        offset = 0
        for i in members:
            n = params[i].data.size
            self.views.append(self.buffer[offset:offset + n].reshape(params[i].shape))
            offset += n
        self.reset()

    def reset(self):
        self.pending = len(self.members)
        self.future = None
        self.first_ready = self.last_ready = self.launched = self.completed = None


def assign_buckets(params, order, cap_bytes, first_cap_bytes):
    """Group parameter indices, taken in `order`, into buckets of one dtype each, returned in
    the order their first parameter appears."""
    buckets = []
    open_bucket = {}
    for i in order:
        p = params[i]
        dtype = p.data.dtype
        nbytes = p.data.nbytes
        current = open_bucket.get(dtype)
        if current is not None:
            members, size, cap = current
            if members and size + nbytes > cap:
                current = None
        if current is None:
            first_of_dtype = not any(params[b[0]].data.dtype == dtype for b in buckets)
            current = [[], 0, first_cap_bytes if first_of_dtype else cap_bytes]
            buckets.append(current[0])
            open_bucket[dtype] = current
        current[0].append(i)
        current[1] += nbytes
    return buckets


class Reducer:
    def __init__(self, params, names, comm, control_comm, bucket_cap_bytes,
                 find_unused_parameters=False, gradient_as_bucket_view=False,
                 first_bucket_bytes=FIRST_BUCKET_BYTES, timeline=None):
        self.params = list(params)
        self.names = list(names)
        self.comm = comm
        self.control = control_comm
        self.world_size = comm.Get_size()
        self.rank = comm.Get_rank()
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.bucket_cap_bytes = bucket_cap_bytes
        self.first_bucket_bytes = min(first_bucket_bytes, bucket_cap_bytes)
        self.timeline = timeline
        self._comm_hook = (None, allreduce_hook)
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
        # Dup'ed on every rank (a collective) whatever each rank's setting is.
        probe_comm = control_comm.Dup()
        interval = _progress_interval() if self.world_size > 1 else None
        self._poller = _ProgressPoller(probe_comm, interval) if interval else None
        self._build(list(reversed(range(len(self.params)))))
        self._handles = [p.register_post_accumulate_grad_hook(self._make_hook(i))
                         for i, p in enumerate(self.params)]

    # ------------------------------------------------------------------ layout
    def _build(self, order):
        groups = assign_buckets(self.params, order, self.bucket_cap_bytes,
                                self.first_bucket_bytes)
        self.buckets = [_Bucket(k, members, self.params[members[0]].data.dtype, self.params)
                        for k, members in enumerate(groups)]
        self._bucket_of = [None] * len(self.params)
        self._view_of = [None] * len(self.params)
        for b in self.buckets:
            for i, view in zip(b.members, b.views):
                self._bucket_of[i] = b
                self._view_of[i] = view
        if self.gradient_as_bucket_view:
            for i, p in enumerate(self.params):
                if p.grad is not None:
                    np.copyto(self._view_of[i], p.grad.data)
                    p.grad = Tensor._make(self._view_of[i])

    def bucket_layout(self):
        """The parameter indices of each bucket, in launch order."""
        return [list(b.members) for b in self.buckets]

    def _rebuild(self):
        """Lay the buckets out in the order gradients became ready on rank 0."""
        seen = set(self._ready_order)
        order = self._ready_order + [i for i in reversed(range(len(self.params)))
                                     if i not in seen]
        order = np.array(order, np.int64)
        self.control.Bcast([order, MPI.INT64_T], root=0)
        self._build(order.tolist())
        self.rebuilt = True

    def register_comm_hook(self, state, hook):
        if self._comm_hook[1] is not allreduce_hook:
            raise RuntimeError("register_comm_hook can only be called once")
        if not callable(hook):
            raise TypeError(f"hook must be callable as hook(state, bucket), got {hook!r}")
        self._comm_hook = (state, hook)

    # ------------------------------------------------------------------ lifecycle
    def prepare_for_backward(self, outputs):
        self._reset_iteration()
        self._armed = True
        roots = [t for t in _tensors_in(outputs) if t.requires_grad]
        for t in roots:
            if t.grad_fn is not None:
                t.grad_fn.register_prehook(self._on_backward_start, t._output_nr)
        if self.find_unused_parameters:
            reached = set()
            seen = set()
            stack = [t.grad_fn for t in roots if t.grad_fn is not None]
            reached.update(id(t) for t in roots if t.grad_fn is None)
            while stack:
                node = stack.pop()
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if type(node) is AccumulateGrad:
                    reached.add(id(node.variable))
                    continue
                stack.extend(e[0] for e in node.next_edges if e is not None)
            self._unused = [i for i, p in enumerate(self.params) if id(p) not in reached]

    def _on_backward_start(self, grad):
        if self._armed and not self._finalize_queued:
            self._start()
        return None

    def _start(self):
        self._finalize_queued = True
        self._backward_start = time.perf_counter()
        engine.queue_callback(self._finalize)
        for i in self._unused:
            if not self._ready[i]:
                self._mark_ready(i, used=False)

    def _make_hook(self, i):
        def hook(param):
            if self._armed:
                if not self._finalize_queued:
                    self._start()
                self._mark_ready(i)
        return hook

    def _mark_ready(self, i, used=True):
        if self._ready[i]:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {i} ('{self.names[i]}') received its "
                f"gradient twice in one backward pass (a second backward through the same "
                f"forward, or, with find_unused_parameters=True, a use of the parameter that "
                f"does not go through the model's output). Run one backward per forward.")
        now = time.perf_counter()
        bucket = self._bucket_of[i]
        view = self._view_of[i]
        param = self.params[i]
        if used:
            grad = param.grad
            if grad.data is view:
                if self._scale != 1.0:
                    np.multiply(view, self._scale, out=view)
            else:
                np.multiply(grad.data, self._scale, out=view)
                if self.gradient_as_bucket_view:
                    param.grad = Tensor._make(view)
            self._used[i] = True
            if not self.rebuilt:
                self._ready_order.append(i)
        else:
            view.fill(0)
        self._ready[i] = True
        if bucket.first_ready is None:
            bucket.first_ready = now
        bucket.last_ready = now
        bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_full_buckets()
        self._progress()

    def _launch_full_buckets(self):
        while self._next_launch < len(self.buckets):
            bucket = self.buckets[self._next_launch]
            if bucket.pending:
                return
            self._launch(bucket)

    def _launch(self, bucket):
        state, hook = self._comm_hook
        grad_bucket = GradBucket(bucket.index, bucket.buffer,
                                 [self.params[i] for i in bucket.members], bucket.views,
                                 bucket.index == len(self.buckets) - 1, self.comm)
        bucket.launched = time.perf_counter()
        bucket.future = hook(state, grad_bucket)
        if self._poller is not None and not self._in_flight:
            self._poller.start()
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
        if not still and self._poller is not None:
            self._poller.stop()

    def _finalize(self):
        backward_end = time.perf_counter()
        try:
            if self.find_unused_parameters:
                for i in np.flatnonzero(~self._ready):
                    self._mark_ready(int(i), used=False)
            globally_used = self._agree(self._next_launch, self._used)
            wait_start = time.perf_counter()
            for bucket in self.buckets:
                result = bucket.future.wait()
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

    def _agree(self, launched, used):
        """Blocking agreement on the control communicator that every rank launched every
        bucket. Returns the parameters used on some rank (with find_unused_parameters).
        On disagreement, completes every outstanding reduction and raises on every rank."""
        n = len(self.buckets)
        vec = np.empty(2 + (len(used) if self.find_unused_parameters else 0), np.int64)
        vec[0], vec[1] = launched, -launched
        if self.find_unused_parameters:
            vec[2:] = used
        self.control.Allreduce(MPI.IN_PLACE, [vec, MPI.INT64_T], MPI.MAX)
        if vec[0] == n and -vec[1] == n:
            return vec[2:].astype(bool) if self.find_unused_parameters else None
        # Someone is short: owe no reduction to anyone, then explain.
        for i in np.flatnonzero(~self._ready):
            self._view_of[i].fill(0)
        for bucket in self.buckets:
            bucket.pending = 0
        self._launch_full_buckets()
        for bucket in self.buckets:
            bucket.future.wait()
        masks = np.empty((self.world_size, len(self.params)), np.uint8)
        self.control.Allgather([self._ready.astype(np.uint8), MPI.UINT8_T],
                               [masks, MPI.UINT8_T])
        raise RuntimeError(_unready_message(masks, self.names, self.params))

    def _unpack(self, globally_used):
        for i, param in enumerate(self.params):
            if globally_used is not None and not globally_used[i]:
                continue
            view = self._view_of[i]
            grad = param.grad
            if self.gradient_as_bucket_view:
                if grad is None or grad.data is not view:
                    param.grad = Tensor._make(view)
                else:
                    grad._bump_version()
            elif grad is None or grad.shape != view.shape:
                param.grad = Tensor._make(view.copy())
            else:
                np.copyto(grad.data, view)
                grad._bump_version()

    def _record(self, backward_end, wait_seconds):
        end = time.perf_counter()
        buckets = [{"index": b.index, "nbytes": b.buffer.nbytes,
                    "params": [self.names[i] for i in b.members],
                    "ready": (b.first_ready, b.last_ready), "launched": b.launched,
                    "completed": b.completed} for b in self.buckets]
        backward = (self._backward_start, backward_end)
        self.last_step = {"backward": backward, "buckets": buckets, "end": end,
                          "wait_seconds": wait_seconds}
        if self.timeline is not None:
            self.timeline.record_step(self.iteration, backward, buckets, end, wait_seconds)

    def _reset_iteration(self):
        if self._poller is not None:
            self._poller.stop()
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
        self._reset_iteration()
        for bucket in self.buckets:
            bucket.buffer.fill(0)
            bucket.pending = 0
        self._launch_full_buckets()
        try:
            self._ready[:] = True
            self._agree(len(self.buckets), self._used)
            for bucket in self.buckets:
                bucket.future.wait()
            if not self.rebuilt and not self.find_unused_parameters:
                self._rebuild()
        finally:
            self._reset_iteration()

    def remove_hooks(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []


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
