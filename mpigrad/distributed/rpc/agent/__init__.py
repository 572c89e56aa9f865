"""The RPC agent: one per process, between `init_rpc` and `shutdown`.

Threads
- The caller's thread encodes a request, registers its Future, and sends the header and
  arrays itself (blocking MPI sends: the receiver's listener takes them at once).
- The listener thread receives everything. It polls its own communicator with `Improbe`,
  only yielding the CPU between empty polls for 2 ms after a message, then sleeping: 20 us
  while a reply is awaited or a message came in the last 50 ms, then doubling up to 2 ms,
  and up to 10 ms after a second without messages, so an idle agent costs about 1% of a
  core and a busy one answers within microseconds. A caller thread waiting for its reply
  (or distributed autograd for its gradients) receives (any) messages itself meanwhile
  (see `receive_until`), yielding for its first 2 ms, then sleeping 1/32 of the time
  nothing came, 20 us to 2 ms (so a long wait, for a slow call or for gradients, costs
  little CPU and a reply little delay), and the listener slows down rather than compete
  with it. Every receiving thread runs the same loop (`_receive_while`), each with its own
  pauses. Receiving never blocks on a send: small control messages and their
  acknowledgements leave through the listener's outbox as `Isend`s. The receiving thread
  decodes each message, completes replies' Futures, runs cheap bookkeeping requests (RRef
  forks and deletes, gradients for distributed autograd) at once, and hands everything
  else on. Messages may thus be handled in a different order than they arrived; no
  protocol here depends on that order (each message is sent only after the reply to the
  one it depends on). The listener also fails calls whose timeout has passed.
- The listener runs the requests it receives itself (the user's functions), with no
  hand-over to another thread; meanwhile the cover thread does the listener's work (it
  receives, sends the outbox, fails calls that time out), sleeping between polls so that it
  leaves the interpreter to the request, from 20 us doubling up to 2 ms while nothing
  comes. Requests the cover thread or a waiting caller
  receive go to a pool of `num_worker_threads` threads. So a nested call (A calls B, which
  calls A back) or a long function never stops other requests. Callbacks of RPC Futures run
  on the pool too, never on a receiving thread.
- A worker that stops at once (not gracefully) first lets the replies being sent leave, so
  a caller whose function returned (or whose async function's Future completed) gets its
  answer before the worker's "bye"; a request the listener had not started is dropped.

Blocking MPI calls (the start-up exchange of names, a caller's sends) run under the
watchdog (fault/watchdog.py) as "RPC" calls with the agent's timeout (none when the timeout is
0): a send to a worker that stopped receiving shows in stall reports and ends the job at the
timeout, or at once if that worker's process has left the job, instead of hanging.

Communicators: the agent duplicates MPI.COMM_WORLD twice, one for messages, one for its own
collectives (start-up and the shutdown agreement), so RPC traffic never matches collectives,
DDP or the user's messages. Headers go on HEADER_TAG; each message's arrays on a tag of
their own (see wire.py).

Shutdown (graceful): every worker repeats rounds of "wait until every request I sent has
had its reply received (even one that timed out: its function may still be running, and its
late reply must not outlive the communicator), then sum over workers how many requests each
has ever sent", serving requests all along, until two consecutive sums are equal: then no
worker sent anything between its two contributions, and every request sent before was
answered. Only then do the listeners stop. A worker that stops without that agreement
(shutdown(graceful=False), or exiting the interpreter) first tells every other worker, whose
calls to it then fail at once. The rounds' collective needs every worker, so once one has left
the others agree among themselves instead: each, its own calls answered, tells the others it
is done and serves until each of them has said the same, within the RPC timeout.
"""
import contextlib
import heapq
import itertools
import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from mpi4py import MPI

from ....futures import Future
from ...buffers import message
from ...errors import DistError
from ...fault.watchdog import blocked
from .. import functions, wire
from ..wire import WorkerInfo

HEADER_TAG = 1
# Seconds the tensors of a message may take to follow its header (at least; the agent's
# rpc_timeout if that is longer).
ARRAYS_DEADLINE = 60.0
_FIRST_DATA_TAG = 2
_MIN_PAUSE, _MAX_PAUSE, _IDLE_PAUSE = 2e-5, 2e-3, 1e-2
_IDLE_AFTER = 1.0  # seconds without messages before polls slow to _IDLE_PAUSE
_BYE_AFTER = 1.0  # seconds a worker leaving at once waits for replies being sent
_STAY_AWAKE = 0.05  # seconds after the last message during which polls stay short
# Seconds after a message (or while awaiting a reply) during which polls only yield the CPU.
# time.sleep has a floor of 50-100 us on Linux (timer slack), where a message between two
# processes of a node takes a few: sleeping between polls made a small call's round trip
# 4x slower than the work it does. A yield lets any other runnable thread or process run.
_SPIN = 2e-3
# Tensors of at most this many bytes in all travel inside the header, as one MPI message:
# below it, a second message (and the receiver's posting and testing of it) costs more than
# copying the bytes.
_INLINE_BYTES = 1 << 16
_msg_ids = itertools.count(1)  # never reused, not even by a later agent
current = None  # this worker's running Agent: set by init_rpc, cleared by shutdown


class _Pace:
    """When a receiving loop last received or sent anything, and its pause while nothing
    comes (see `backoff`)."""

    def __init__(self):
        self.seen()

    def seen(self):
        self.last = time.monotonic()
        self.pause = _MIN_PAUSE

    def quiet(self):
        return time.monotonic() - self.last

    def backoff(self, most):
        """The pause for now: _MIN_PAUSE after something was seen, doubling up to `most`."""
        pause = self.pause
        self.pause = min(2 * pause, most)
        return pause


class RpcTimeoutError(DistError, TimeoutError):
    """An RPC did not complete within its timeout."""


class WorkerUnavailableError(DistError):
    """The destination worker has shut down or exited; nothing will answer."""


class RpcFuture(Future):
    """The Future of an RPC. Callbacks added before the reply arrives run on the agent's
    pool (a callback may itself make blocking RPCs; a thread receiving messages, the
    listener or a waiting caller, must stay free). A thread
    that waits for one receives messages itself meanwhile, so its reply needs no hand-over
    from the listener."""

    def __init__(self, agent):
        super().__init__()
        self._agent = agent
        self.to_self = False

    def _progress(self, block):
        # A call to this worker is left to the listener, which receives it, runs it and
        # receives the reply: a waiting thread that polled meanwhile would keep taking the
        # interpreter from it (640 us a call; Python hands its GIL over on request only
        # after 5 ms).
        if block and not self.to_self:
            self._agent.receive_until(lambda: self._completed)

    def add_done_callback(self, callback):
        agent = self._agent

        def dispatch(fut):
            if getattr(agent.receiving, "active", False):
                agent.pool.submit(callback, fut)
            else:
                callback(fut)

        super().add_done_callback(dispatch)


class _Call:
    """A request waiting for its reply."""
    __slots__ = ("future", "dest", "what", "keep")

    def __init__(self, future, dest, what, keep):
        self.future, self.dest, self.what, self.keep = future, dest, what, keep


class Handler:
    """How the agent serves one kind of request: `prepare(sender, payload)` runs on the
    receiving thread before the request goes to the pool (bookkeeping the sender may rely on
    once it has the reply) and returns what `run(sender, prepared)` gets; `run` returns the
    reply's value. `inline` handlers run entirely on the receiving thread and must be quick
    and never block."""

    def __init__(self, run, inline=False, prepare=None):
        self.run, self.inline, self.prepare = run, inline, prepare


class _Watched:
    """What the watchdog needs to know of the RPC agent's calls: a name for reports, the
    ranks they involve and how long one may block."""

    def __init__(self, size, timeout):
        self.name = "RPC"
        self.ranks = tuple(range(size))
        self.timeout = timeout if timeout > 0 else float("inf")


class Agent:
    def __init__(self, name, options, handlers, codec, problem):
        world = MPI.COMM_WORLD
        self.comm = world.Dup()
        self.collective_comm = world.Dup()
        for comm in (self.comm, self.collective_comm):
            comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.watched = _Watched(self.size, max(ARRAYS_DEADLINE, options.rpc_timeout)
                                if options.rpc_timeout > 0 else 0)
        # Every rank learns every rank's name and mistake, so all raise together, not hang.
        with blocked(self.watched, "init_rpc: exchanging the workers' names"):
            reports = self.collective_comm.allgather((name, problem))
        try:
            _check_reports(reports)
        except ValueError:
            self.comm.Free()
            self.collective_comm.Free()
            raise
        names = [n for n, _ in reports]
        self.workers = tuple(WorkerInfo(n, r) for r, n in enumerate(names))
        self.info = self.workers[self.rank]
        self._by_name = {w.name: w for w in self.workers}
        # What a blocked send to each rank is called in stall reports, made once: a send is
        # on the small-call path, where an f-string per message shows.
        self._sending_to = [f"RPC: sending to {self.describe(r)}" for r in range(self.size)]
        self.timeout = options.rpc_timeout
        self.arrays_deadline = max(ARRAYS_DEADLINE, self.timeout)
        self.handlers = handlers
        self.codec = codec  # encode/decode hooks of RRef and distributed autograd
        self.pool = ThreadPoolExecutor(options.num_worker_threads,
                                       thread_name_prefix=f"rpc-{name}")
        self._lock = threading.Condition()  # an RLock: RRef.__del__ may run under it
        self._calls = {}
        self._deadlines = []  # heap of (deadline, msg_id)
        self._data_tags = itertools.count()
        self._tag_span = self.comm.Get_attr(MPI.TAG_UB) - _FIRST_DATA_TAG
        self._outbox = queue.SimpleQueue()  # control requests the listener sends
        self._draining = False
        self._receivers = 0  # threads in receive_until: the listener need not hurry then
        self.receiving = threading.local()  # .active: this thread is handling a message
        self._in_flight = []  # (request, buffer) of Isends not known to be complete
        self._in_flight_lock = threading.Lock()
        self._replying = 0  # replies due or being sent (every path): they leave before a "bye"
        self._upkeep = threading.Lock()  # one thread at a time sends the outbox, expires calls
        self._covering = threading.Event()  # set while the listener runs a request
        self._dead = {}  # rank -> why it is gone
        self._done = set()  # ranks that finished shutting down among the survivors
        self._fences = []  # Futures every later request waits for first (see fence)
        self.requests_sent = 0
        self.replies_received = 0  # including late ones, for calls that timed out
        self._late = {}  # msg_id -> dest, for calls that timed out and await their reply
        self._stopping = threading.Event()
        self.listener = threading.Thread(target=self._listen, name=f"rpc-listener-{name}",
                                         daemon=True)
        self.cover = threading.Thread(target=self._cover, name=f"rpc-cover-{name}",
                                      daemon=True)

    def start(self):
        """Start receiving; the caller has made this agent the current one first, since
        messages may arrive at once (the other workers can be ahead). The cover thread
        first: the listener may run a request at once, and it is covered (and has a thread
        id to be observed by) from the start."""
        self.cover.start()
        self.listener.start()

    # ---- naming --------------------------------------------------------------------------

    def worker(self, to):
        """The WorkerInfo for `to`: a name, a rank, or a WorkerInfo."""
        if isinstance(to, WorkerInfo):
            to = to.name
        if isinstance(to, str):
            info = self._by_name.get(to)
            if info is None:
                raise ValueError(f"unknown RPC worker {to!r}; the workers are "
                                 f"{', '.join(repr(w.name) for w in self.workers)}")
            return info
        if isinstance(to, (int, np.integer)) and not isinstance(to, bool):
            if not 0 <= to < self.size:
                raise ValueError(f"unknown RPC worker rank {to}; ranks are 0..{self.size - 1}")
            return self.workers[int(to)]
        raise TypeError(f"an RPC destination is a worker name, rank or WorkerInfo, got "
                        f"{type(to).__name__}")

    def describe(self, rank):
        return f"worker {self.workers[rank].name!r} (rank {rank})"

    # ---- sending requests ------------------------------------------------------------------

    def request(self, dest, kind, payload, what, timeout=None, keep=None, fenced=True):
        """Send a request to rank `dest`; returns the RpcFuture of its reply. `timeout` in
        seconds (None: the agent's default; 0: none). `keep` stays referenced until the reply
        arrives (RRefs in flight). The user's calls are `fenced` (see fence); a protocol's
        requests sent while serving one must not be: the fence they would wait for can
        itself wait for this very request, through another worker's handler."""
        self.check_reachable(dest, what)
        if fenced and self._fences:
            self._await_fences(what, self.timeout if timeout is None else timeout)
        msg_id = next(_msg_ids)
        header, arrays, tag = self.encode(dest, kind, msg_id, payload)
        future = self._register(dest, msg_id, what, timeout, keep)
        try:
            self._send(dest, header, arrays, tag)
        except Exception:
            with self._lock:
                self._calls.pop(msg_id, None)
                self.requests_sent -= 1
                self._lock.notify_all()
            raise
        return future

    def notify(self, dest, kind, payload, what):
        """Send a request that gets no reply (message id 0) from the calling thread. Nothing
        counts it for shutdown: the protocol using it must know by other means that it was
        handled (distributed autograd's gradients: the receiver's pass waits for every one
        addressed to it before it answers)."""
        self.check_reachable(dest, what)
        self._send(dest, *self.encode(dest, kind, 0, payload))

    def fence(self, futures):
        """Fenced requests (the user's calls) sent from now on, from any thread, first wait
        for `futures` (whose errors are the business of whoever made them): work handed off
        without a wait still happens before anything this worker asks next."""
        with self._lock:
            self._fences.extend(futures)

    def _await_fences(self, what, seconds):
        """Wait for the fences, within the call's own timeout (`seconds`, 0: none)."""
        deadline = time.monotonic() + seconds if seconds and seconds > 0 else None
        with self._lock:
            fences = list(self._fences)
        for future in fences:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not future.done() and not self.receive_until(future.done, left):
                if deadline is not None and time.monotonic() > deadline:
                    raise RpcTimeoutError(
                        f"{what} timed out: this worker's earlier work it must wait for "
                        f"(the clean-up of a distributed autograd context) did not finish "
                        f"within the call's timeout of {seconds:g} s")
                break  # the agent is stopping
        with self._lock:
            self._fences = [f for f in self._fences if not f.done()]

    def post(self, dest, kind, payload, what, on_reply=None):
        """Queue a small control request (no arrays) for the listener to send; safe from any
        thread, from __del__ too. The listener registers it, so shutdown waits for its ack;
        `on_reply(future)` runs once the ack arrives."""
        self._outbox.put((dest, kind, payload, what, on_reply))

    def _register(self, dest, msg_id, what, timeout, keep):
        future = RpcFuture(self)
        future.to_self = dest == self.rank
        seconds = self.timeout if timeout is None else timeout
        with self._lock:
            self._calls[msg_id] = _Call(future, dest, what, keep)
            self.requests_sent += 1
            if seconds and seconds > 0:
                heapq.heappush(self._deadlines, (time.monotonic() + seconds, msg_id))
        return future

    def check_reachable(self, dest, what):
        """Raise if this agent has stopped or worker `dest` has left."""
        if self._stopping.is_set():
            raise RuntimeError(f"{what}: the RPC agent of this worker has shut down")
        gone = self._dead.get(dest)
        if gone is not None:
            raise WorkerUnavailableError(f"{what}: {self.describe(dest)} is unavailable: {gone}")

    def encode(self, dest, kind, msg_id, payload):
        body, arrays, layouts, grad_tensors = wire.dumps(
            payload, lambda r: self.codec.fork(r, dest), self.codec.records_grad())
        size = sum(a.nbytes for a in arrays)
        autograd = self.codec.record_send(dest, grad_tensors)
        if size <= _INLINE_BYTES:
            return wire.header(kind, msg_id, 0, layouts, autograd, body, arrays), [], 0
        tag = _FIRST_DATA_TAG + next(self._data_tags) % self._tag_span
        return wire.header(kind, msg_id, tag, layouts, autograd, body), arrays, tag

    def _send(self, dest, header, arrays, tag):
        with blocked(self.watched, self._sending_to[dest], collective=False, peers=(dest,)):
            self.comm.Send([header, MPI.BYTE], dest, HEADER_TAG)
            if arrays:
                MPI.Request.Waitall([self.comm.Isend(message(a), dest, tag) for a in arrays])

    # ---- the listener ------------------------------------------------------------------------

    def _listen(self):
        def pause(pace):
            quiet = pace.quiet()
            if self._receivers:
                return _MAX_PAUSE  # a waiting caller receives; don't compete with it
            if quiet < _SPIN:
                return 0
            if self._calls or quiet < _STAY_AWAKE:
                return _MIN_PAUSE
            return pace.backoff(_IDLE_PAUSE if quiet > _IDLE_AFTER else _MAX_PAUSE)
        self._receive_while(lambda: not self._stopping.is_set(), pause, run_here=True)

    def _cover(self):
        """While the listener runs a request: receive (requests go to the pool), send the
        outbox, expire calls. Between polls it sleeps rather than yields, leaving the
        interpreter to the request, which is most often done before the first poll, and
        sleeps longer the longer nothing comes (a waiting caller, the request's own thread
        too, receives what it waits for itself)."""
        def covering():
            return self._covering.is_set() and not self._stopping.is_set()

        def pause(pace):
            return _MAX_PAUSE if self._receivers else pace.backoff(_MAX_PAUSE)
        while not self._stopping.is_set():
            # Once the agent stops, _covering stays set (see _run_here): this never waits
            # for a request that will not come.
            self._covering.wait()
            if self._stopping.is_set():
                return
            time.sleep(_MIN_PAUSE)
            self._receive_while(covering, pause)

    def receive_until(self, done, seconds=None):
        """Receive and handle messages on this thread until `done()` (or `seconds` pass, or
        the agent stops, and the listener completes what is pending); returns `done()`."""
        deadline = None if seconds is None else time.monotonic() + seconds
        with self._lock:
            self._receivers += 1
        try:
            # Not in the caller's autograd context: each message brings its own.
            with self.codec.running_in(None):
                self._receive_while(
                    lambda: not (done() or self._stopping.is_set()
                                 or deadline is not None and time.monotonic() > deadline),
                    _waiting_pause, upkeep=False)
        finally:
            with self._lock:
                self._receivers -= 1
        return done()

    def _receive_while(self, running, pause, run_here=False, upkeep=True):
        """The receiving loop of the listener, the cover thread and waiting callers: while
        `running()`, poll, handle what came (with `run_here`, a request is run on this
        thread, the cover thread receiving meanwhile), and with `upkeep` send the outbox and
        expire calls (a waiting caller leaves that to the listener: it is off the path of
        its reply); after a poll that did nothing, wait `pause(pace)` seconds (0: only
        yield the CPU)."""
        status = MPI.Status()
        pace = _Pace()
        sent = False
        while running():
            run = None
            try:
                incoming = self.comm.Improbe(MPI.ANY_SOURCE, HEADER_TAG, status)
                if incoming is not None:
                    run = self._receive(incoming, status, run_here)
                if upkeep:
                    sent = self._keep_up()
            except Exception:  # a receiving thread must survive anything one message does
                sys.stderr.write(f"[{self.info.name}] RPC receive error:\n"
                                 f"{traceback.format_exc()}")
                continue
            if run is not None:
                self._run_here(run)
            if incoming is not None or sent:
                pace.seen()
                continue
            seconds = pause(pace)
            if seconds:
                time.sleep(seconds)
            else:
                os.sched_yield()

    def _run_here(self, run):
        """Run a request on the listener, with no hand-over to a pool thread (16-20 us, a
        fifth of a small call's round trip); the cover thread receives meanwhile, so a long
        or nested request never stops the others. Not once the agent is stopping: the
        request is left behind, as those of the pool are."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._covering.set()
        try:
            run()
        except Exception:  # a reply that could not go: the listener must survive it
            sys.stderr.write(f"[{self.info.name}] RPC listener error:\n"
                             f"{traceback.format_exc()}")
        finally:
            with self._lock:  # against _stop_receiving, which sets it for good
                if not self._stopping.is_set():
                    self._covering.clear()

    def _keep_up(self):
        """Send the outbox and fail calls whose timeout passed; returns whether anything was
        sent. Skipped while another receiving thread does it."""
        if not self._upkeep.acquire(blocking=False):
            return False
        try:
            sent = self._flush_outbox()
            self._expire_calls()
            return sent
        finally:
            self._upkeep.release()

    def _receive(self, incoming, status, run_here=False):
        """Handle one message; with `run_here`, a request for the pool is returned instead,
        as a function for this thread to call once it is no longer receiving."""
        self.receiving.active = True
        try:
            return self._handle(incoming, status, run_here)
        finally:
            self.receiving.active = False

    def _handle(self, incoming, status, run_here):
        source = status.Get_source()
        header = bytearray(status.Get_count(MPI.BYTE))
        incoming.Recv([header, MPI.BYTE])
        try:
            kind, msg_id, tag, autograd, body, arrays, buffers = wire.parse(header)
            if buffers:
                self._receive_arrays(buffers, source, tag)
        except Exception as exc:
            # A malformed, forged or truncated message: dropped, whoever sent it; its msg_id
            # cannot be trusted enough to answer. The agent goes on serving.
            sys.stderr.write(f"[{self.info.name}] RPC: dropped a message from "
                             f"{self.describe(source)}: {exc}\n")
            return
        if kind == "reply":
            self._complete(source, msg_id, autograd, body, arrays)
            return
        handler = self.handlers[kind]
        try:
            payload = self.codec.decode(source, autograd, body, arrays)
            if handler.prepare is not None:
                payload = handler.prepare(source, payload)
        except Exception as exc:
            if msg_id:
                self._reply_on_pool(self._reply, source, msg_id, False, wire.describe_error(exc),
                                    None)
            return
        context = self.codec.context_of(autograd)
        if handler.inline:
            try:
                result, ok = handler.run(source, payload), True
            except Exception as exc:
                result, ok = wire.describe_error(exc), False
            if msg_id:
                with self._replying_now():
                    self._isend(source, self.encode(source, "reply", msg_id, (ok, result))[0])
        elif run_here:
            return lambda: self._serve(source, msg_id, handler, payload, context)
        else:
            self.pool.submit(self._serve, source, msg_id, handler, payload, context)
        return None

    def _serve(self, source, msg_id, handler, payload, context):
        with self.codec.running_in(context):
            try:
                result, ok = handler.run(source, payload), True
            except BaseException as exc:  # every failure goes back to the caller
                result, ok = wire.describe_error(exc), False
            del payload
            if isinstance(result, functions.Deferred):
                # An async function: reply when its Future completes, from a pool thread
                # (never from the thread completing it, which may be the listener), and let
                # this thread go now.
                result.future.add_done_callback(
                    lambda done: self._reply_on_pool(self._reply_when_done, source, msg_id,
                                                     done, context))
            elif msg_id:
                self._reply(source, msg_id, ok, result, context)

    def _reply_when_done(self, source, msg_id, future, context):
        try:
            result, ok = future.wait(), True
        except BaseException as exc:
            result, ok = wire.describe_error(exc), False
        if msg_id:
            self._reply(source, msg_id, ok, result, context)

    def _receive_arrays(self, buffers, source, tag):
        """The tensors that follow a header; they are sent right after it, so one that does
        not arrive within ARRAYS_DEADLINE seconds never will (a truncated message)."""
        requests = [self.comm.Irecv(message(a), source, tag) for a in buffers]
        deadline = time.monotonic() + self.arrays_deadline
        while not MPI.Request.Testall(requests):
            if time.monotonic() > deadline:
                for request in requests:
                    request.Cancel()
                raise TimeoutError(f"its tensors did not arrive within "
                                   f"{self.arrays_deadline:g} s")
            os.sched_yield()  # they were sent right after the header

    def _reply(self, dest, msg_id, ok, result, context):
        if dest in self._dead:
            return
        with self._replying_now(), self.codec.running_in(context):
            try:
                header, arrays, tag = self.encode(dest, "reply", msg_id, (ok, result))
            except Exception as exc:
                header, arrays, tag = self.encode(dest, "reply", msg_id,
                                                  (False, wire.describe_error(exc)))
            self._send(dest, header, arrays, tag)

    @contextlib.contextmanager
    def _replying_now(self):
        """Count a reply as being sent for the block: a worker leaving at once lets it go
        before its "bye" (see stop)."""
        with self._lock:
            self._replying += 1
        try:
            yield
        finally:
            self._replied()

    def _replied(self):
        with self._lock:
            self._replying -= 1
            self._lock.notify_all()

    def _reply_on_pool(self, reply, *args):
        """`reply(*args)` on the pool, counted as being sent from now on, not only once a
        pool thread starts it."""
        with self._lock:
            self._replying += 1

        def run():
            try:
                reply(*args)
            finally:
                self._replied()
        try:
            self.pool.submit(run)
        except RuntimeError:  # the pool has shut down: this worker is leaving at once
            self._replied()

    def _complete(self, source, msg_id, autograd, body, arrays):
        with self._lock:
            call = self._calls.pop(msg_id, None)
            if call is None and self._late.pop(msg_id, None) is None:
                # Not a reply this agent awaits: the late answer to a call of a worker
                # already counted as gone, or a stray from the previous agent, whose freed
                # communicator MPI may hand to this one (an RRef collected after the last
                # shutdown round sends its delete, and the ack arrives here). Counted, it
                # made replies outnumber requests and the next shutdown wait forever.
                return
            self.replies_received += 1
            self._lock.notify_all()
        if call is None:
            return  # timed out: the caller was told already
        try:
            ok, value = self.codec.decode(source, autograd, body, arrays)
        except Exception as exc:
            call.future.set_exception(exc)
            return
        if ok:
            call.future.set_result(value)
        else:
            call.future.set_exception(
                wire.rebuild_error(value, f"{self.describe(source)} in {call.what}"))

    def _isend(self, dest, header):
        buffer = bytearray(header)
        request = self.comm.Isend([buffer, MPI.BYTE], dest, HEADER_TAG)
        with self._in_flight_lock:  # receiving threads send acks; the listener prunes
            self._in_flight.append((request, buffer))

    def _flush_outbox(self):
        sent = False
        self._draining = True
        try:
            while True:
                try:
                    dest, kind, payload, what, on_reply = self._outbox.get_nowait()
                except queue.Empty:
                    break
                sent = True
                if dest in self._dead:
                    continue
                msg_id = next(_msg_ids)
                header = self.encode(dest, kind, msg_id, payload)[0]
                future = self._register(dest, msg_id, what, None, None)
                if on_reply is not None:
                    future.add_done_callback(on_reply)
                self._isend(dest, header)
        finally:
            self._draining = False
        if self._in_flight:
            with self._in_flight_lock:
                self._in_flight = [(r, b) for r, b in self._in_flight if not r.Test()]
        return sent

    def _expire_calls(self):
        if len(self._deadlines) > 1024 and len(self._deadlines) > 4 * len(self._calls):
            with self._lock:  # answered calls' deadlines: drop them, or the heap only grows
                self._deadlines = [d for d in self._deadlines if d[1] in self._calls]
                heapq.heapify(self._deadlines)
        if not self._deadlines or self._deadlines[0][0] > time.monotonic():
            return
        now = time.monotonic()
        expired = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, msg_id = heapq.heappop(self._deadlines)
                call = self._calls.pop(msg_id, None)
                if call is not None:
                    expired.append(call)
                    self._late[msg_id] = call.dest
            self._lock.notify_all()
        for call in expired:
            call.future.set_exception(RpcTimeoutError(
                f"{call.what} on {self.describe(call.dest)} timed out: no reply within the "
                f"timeout (pass timeout= to the call, or rpc_timeout= in the backend options)"))

    # ---- peers going away ----------------------------------------------------------------

    def peer_gone(self, rank, why):
        self._dead[rank] = why
        with self._lock:
            lost = [(i, c) for i, c in self._calls.items() if c.dest == rank]
            for msg_id, _ in lost:
                del self._calls[msg_id]
            late = [msg_id for msg_id, dest in self._late.items() if dest == rank]
            for msg_id in late:
                del self._late[msg_id]
            self.replies_received += len(lost) + len(late)  # no reply will ever come
            self._lock.notify_all()
        for _, call in lost:
            call.future.set_exception(WorkerUnavailableError(
                f"{call.what}: {self.describe(rank)} became unavailable before replying: {why}"))

    # ---- shutdown ----------------------------------------------------------------------------

    def _idle(self):
        return (self._outbox.empty() and not self._draining
                and self.replies_received == self.requests_sent)

    def wait_until_idle(self):
        with self._lock:
            while not self._idle():
                self._lock.wait(0.01)

    def agree_all_done(self):
        """The graceful-shutdown rounds described in the module docstring; among the workers
        that are left if one has departed (the rounds' collective needs every worker).
        Returns the departed workers' descriptions (empty when none left)."""
        previous = None
        while True:
            self.wait_until_idle()
            if self._dead:
                return self._agree_among_survivors()
            total = np.array(self.requests_sent, np.int64)
            summed = np.zeros_like(total)
            request = self.collective_comm.Iallreduce(total, summed, MPI.SUM)
            while not request.Test():
                if self._dead:
                    # A worker left mid-round: this collective can never complete. It is
                    # left pending on a communicator that is then never used again.
                    return self._agree_among_survivors()
                time.sleep(1e-3)  # the listener and pool keep serving meanwhile
            if previous is not None and summed == previous:
                return []
            previous = summed.copy()

    def peer_done(self, rank):
        with self._lock:
            self._done.add(rank)
            self._lock.notify_all()

    def _agree_among_survivors(self):
        """Each worker left tells the others it has no request of its own outstanding, then
        serves until each of them has said the same (or left too), within the agent's
        timeout: its own calls are all answered, and no one still needs it."""
        self.wait_until_idle()
        others = [r for r in range(self.size) if r != self.rank and r not in self._dead]
        for rank in others:
            self.post(rank, "done", None, "rpc.shutdown among the workers left")
        deadline = time.monotonic() + (self.timeout or float("inf"))
        with self._lock:
            while not all(r in self._done or r in self._dead for r in others):
                if time.monotonic() > deadline:
                    waiting = [self.describe(r) for r in others
                               if r not in self._done and r not in self._dead]
                    raise RpcTimeoutError(f"rpc.shutdown: {', '.join(waiting)} did not shut "
                                          f"down within {self.timeout:g} s after a worker left")
                self._lock.wait(0.01)
        self.wait_until_idle()
        return [f"{self.describe(r)} ({why})" for r, why in sorted(self._dead.items())]

    def stop(self, graceful, why):
        if not graceful:
            header = self.encode(self.rank, "bye", 0, why)[0]
            self._stop_receiving(graceful)
            with self._lock:  # a request whose function has returned gets its reply first
                self._lock.wait_for(lambda: not self._replying, _BYE_AFTER)
            requests = [self.comm.Isend([header, MPI.BYTE], r, HEADER_TAG)
                        for r in range(self.size) if r != self.rank and r not in self._dead]
            _wait_briefly(requests)
        else:
            self._stop_receiving(graceful)
        self.pool.shutdown(wait=graceful)
        with self._lock:
            calls, self._calls = list(self._calls.values()), {}
        for call in calls:
            call.future.set_exception(RuntimeError(f"{call.what}: the RPC agent of this worker "
                                                   f"shut down before the reply arrived"))
        if graceful and not self._dead:
            # With a worker gone, a pending collective may be left on these: leave them to
            # MPI_Finalize rather than free them under it.
            self.comm.Free()
            self.collective_comm.Free()


    def _stop_receiving(self, graceful):
        with self._lock:  # against _run_here: the listener is running a request, or never will
            self._stopping.set()
            running = self._covering.is_set()
            self._covering.set()  # wakes the cover thread, and stays set
        self.cover.join()
        if graceful or not running:
            # Not stopping gracefully, a request the listener runs is left behind, as those
            # of the pool are.
            self.listener.join()


def _waiting_pause(pace):
    """A waiting caller's pause: only yield for _SPIN after the last message, then sleep
    1/32 of the time since (20 us to 2 ms), so a reply waits little longer than it took
    (a 5 ms call: 5.8 ms, against 5.5 with the 20 us pause; doubling, as the cover
    thread's pause, made it 7.7 ms: the caller slept through its reply). A long wait, for
    a slow call or for gradients, then costs a hundred polls, not one every 20-80 us: a
    caller used 0.02 s of CPU waiting for a 1 s call, against 0.22 s."""
    quiet = pace.quiet()
    return 0 if quiet < _SPIN else min(_MAX_PAUSE, max(_MIN_PAUSE, quiet / 32))


def current_agent(what):
    """This worker's running agent; `what` names the caller in the error without one."""
    agent = current
    if agent is None:
        raise RuntimeError(f"{what}: RPC has not been initialized on this worker; call "
                           f"mpigrad.distributed.rpc.init_rpc(name) on every worker first")
    return agent


def _wait_briefly(requests, seconds=2.0):
    """Small eager sends complete at once; never hang a dying process on one that doesn't."""
    deadline = time.monotonic() + seconds
    while requests and time.monotonic() < deadline:
        requests = [r for r in requests if not r.Test()]
        time.sleep(1e-3)
    for r in requests:
        r.Cancel()


def _check_reports(reports):
    for rank, (_, problem) in enumerate(reports):
        if problem is not None:
            raise ValueError(f"init_rpc on rank {rank}: {problem}")
    seen = {}
    for rank, (name, _) in enumerate(reports):
        if not isinstance(name, str) or not name:
            raise ValueError(f"init_rpc: rank {rank} passed the name {name!r}; every worker "
                             f"needs a non-empty string name")
        if name in seen:
            raise ValueError(f"init_rpc: ranks {seen[name]} and {rank} both chose the name "
                             f"{name!r}; worker names must be unique")
        seen[name] = rank

