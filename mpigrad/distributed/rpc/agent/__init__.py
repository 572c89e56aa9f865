"""The RPC agent: one per process, between `init_rpc` and `shutdown`, made of rooms:

- transport.py: a message on MPI (a header, then its tensors on a tag of their own).
- listener.py: the threads that receive (the listener, its cover thread, waiting callers)
  and how long each pauses between polls.
- serving.py: what a received message does (a reply completes its call, a request runs its
  handler on the receiving thread, the listener or the pool) and the replies being sent.
- replies.py: the calls awaiting replies, their deadlines, the counts shutdown compares, and
  the outbox of control requests.
- shutdown.py: the workers that have left, and the graceful shutdown's agreement.

The caller's thread encodes a request, registers its Future, and sends the header and
arrays itself (blocking MPI sends: the receiver's listener takes them at once). Callbacks of
RPC Futures run on the pool, never on a receiving thread. A worker that stops at once (not
gracefully) first lets the replies being sent leave, so a caller whose function returned (or
whose async function's Future completed) gets its answer before the worker's "bye"; a
request the listener had not started is dropped.

Blocking MPI calls (the start-up exchange of names, a caller's sends) run under the
watchdog (fault/watchdog.py) as "RPC" calls with the agent's timeout (none when the timeout is
0): a send to a worker that stopped receiving shows in stall reports and ends the job at the
timeout, or at once if that worker's process has left the job, instead of hanging.

Communicators: the agent duplicates MPI.COMM_WORLD twice, one for messages, one for its own
collectives (start-up and the shutdown agreement), so RPC traffic never matches collectives,
DDP or the user's messages.
"""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from mpi4py import MPI

from ...fault import segments
from ...fault.watchdog import blocked
from ..wire import WorkerInfo
from .listener import Listener
# Also the agent's API, imported from here: its errors, Handler, HEADER_TAG.
from .replies import Replies, RpcTimeoutError, WorkerUnavailableError, new_msg_id
from .serving import Handler, Server
from .shutdown import Shutdown
from .transport import HEADER_TAG, Transport, watched

_BYE_AFTER = 1.0  # seconds a worker leaving at once waits for replies being sent
current = None  # this worker's running Agent: set by init_rpc, cleared by shutdown


class Agent:
    """This worker's agent: the rooms above, tied together. Its methods are what calls,
    RRefs, distributed autograd and api.py use; `handlers` maps each request kind to its
    Handler, `codec` holds the encode/decode hooks of RRefs and distributed autograd, and
    `problem` is this rank's mistake in its init_rpc arguments (None if none), raised on every
    rank."""

    def __init__(self, name, options, handlers, codec, problem):
        world = MPI.COMM_WORLD
        self.comm = world.Dup()
        self.collective_comm = world.Dup()
        for comm in (self.comm, self.collective_comm):
            comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.rank, self.size = world.Get_rank(), world.Get_size()
        watching = watched(self.size, options.rpc_timeout)
        # Every rank learns every rank's name and mistake, so all raise together, not hang.
        with blocked(watching, "init_rpc: exchanging the workers' names"):
            reports = self.collective_comm.allgather((name, problem))
        try:
            _check_reports(reports)
        except ValueError:
            self.comm.Free()
            self.collective_comm.Free()
            raise
        # Every rank is past MPI_Init (the exchange completed), so every local rank has
        # mapped MPI's shared memory: its name can go, as init_process_group lets it go, and
        # a job that only uses RPC leaves nothing in /dev/shm however it ends.
        segments.release()
        names = [n for n, _ in reports]
        self.workers = tuple(WorkerInfo(n, r) for r, n in enumerate(names))
        self.info = self.workers[self.rank]
        self._by_name = {w.name: w for w in self.workers}
        self.timeout = options.rpc_timeout
        self.codec = codec  # encode/decode hooks of RRef and distributed autograd
        self.pool = ThreadPoolExecutor(options.num_worker_threads,
                                       thread_name_prefix=f"rpc-{name}")
        self._lock = threading.Condition()  # an RLock: RRef.__del__ may run under it
        self._fences = []  # Futures every later request waits for first (see fence)
        self.transport = Transport(self.comm, watching, codec,
                                   [self.describe(r) for r in range(self.size)], self.timeout)
        self.shutdown = Shutdown(self, self._lock, self.collective_comm)
        self.replies = Replies(self, self._lock, self.shutdown.dead)
        self.server = Server(self, self._lock, handlers, self.pool)
        self.handlers = handlers
        self.listener = Listener(name, self._lock, self.server.poll, self._keep_up,
                                 self.replies.awaiting, lambda: codec.running_in(None))

    def start(self):
        """Start receiving; the caller has made this agent the current one first, since
        messages may arrive at once (the other workers can be ahead)."""
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
        msg_id = new_msg_id()
        header, arrays, tag = self.transport.encode(dest, kind, msg_id, payload)
        future = self.replies.register(dest, msg_id, what, timeout, keep)
        try:
            self.transport.send(dest, header, arrays, tag)
        except Exception:
            self.replies.withdraw(msg_id)
            raise
        return future

    def notify(self, dest, kind, payload, what):
        """Send a request that gets no reply (message id 0) from the calling thread. Nothing
        counts it for shutdown: the protocol using it must know by other means that it was
        handled (distributed autograd's gradients: the receiver's pass waits for every one
        addressed to it before it answers)."""
        self.check_reachable(dest, what)
        self.transport.send(dest, *self.transport.encode(dest, kind, 0, payload))

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
        self.replies.post(dest, kind, payload, what, on_reply)

    def check_reachable(self, dest, what):
        """Raise if this agent has stopped or worker `dest` has left."""
        if self.listener.stopping():
            raise RuntimeError(f"{what}: the RPC agent of this worker has shut down")
        gone = self.shutdown.dead.get(dest)
        if gone is not None:
            raise WorkerUnavailableError(f"{what}: {self.describe(dest)} is unavailable: {gone}")

    # ---- receiving ---------------------------------------------------------------------------

    def receive_until(self, done, seconds=None):
        """Receive and handle messages on this thread until `done()` (or `seconds` pass, or
        the agent stops); returns `done()`."""
        return self.listener.receive_until(done, seconds)

    def _keep_up(self):
        """The receiving threads' upkeep: send the outbox, forget completed sends, fail calls
        whose timeout passed; returns whether anything was sent."""
        sent = self.replies.flush_outbox(self.transport)
        self.transport.prune()
        self.replies.expire()
        return sent

    # ---- peers going away, and shutdown ----------------------------------------------------

    def peer_gone(self, rank, why):
        self.shutdown.peer_gone(rank, why)

    def peer_done(self, rank):
        self.shutdown.peer_done(rank)

    def wait_until_idle(self):
        self.replies.wait_until_idle()

    def agree_all_done(self):
        return self.shutdown.agree_all_done()

    def stop(self, graceful, why):
        if not graceful:
            header = self.transport.encode(self.rank, "bye", 0, why)[0]
            self.listener.stop(graceful)
            with self._lock:  # a request whose function has returned gets its reply first
                self._lock.wait_for(lambda: not self.server.replying, _BYE_AFTER)
            self.transport.say_bye(header, [r for r in range(self.size)
                                            if r != self.rank and r not in self.shutdown.dead])
        else:
            self.listener.stop(graceful)
        self.transport.cancel_arrivals()
        self.pool.shutdown(wait=graceful)
        self.replies.fail_all()
        if graceful and not self.shutdown.dead:
            # With a worker gone, a pending collective may be left on these: leave them to
            # MPI_Finalize rather than free them under it.
            self.comm.Free()
            self.collective_comm.Free()


def current_agent(what):
    """This worker's running agent; `what` names the caller in the error without one."""
    agent = current
    if agent is None:
        raise RuntimeError(f"{what}: RPC has not been initialized on this worker; call "
                           f"mpigrad.distributed.rpc.init_rpc(name) on every worker first")
    return agent


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

