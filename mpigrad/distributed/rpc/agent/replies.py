"""The calls this worker awaits: each request's Future until its reply comes, the count of
requests sent and replies received (which the shutdown agreement compares), each call's
deadline, and the outbox of small control requests that the listener sends.
"""
import heapq
import itertools
import queue
import sys
import time

from ....futures import Future
from ...errors import DistError
from .. import wire

_msg_ids = itertools.count(1)  # never reused, not even by a later agent


def new_msg_id():
    return next(_msg_ids)


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
            if getattr(agent.listener.receiving, "active", False):
                agent.pool.submit(callback, fut)
            else:
                callback(fut)

        super().add_done_callback(dispatch)


class _Call:
    """A request waiting for its reply."""
    __slots__ = ("future", "dest", "what", "keep")

    def __init__(self, future, dest, what, keep):
        self.future, self.dest, self.what, self.keep = future, dest, what, keep


class Replies:
    """The calls of `agent` awaiting replies. `lock` is the agent's condition (an RLock:
    RRef.__del__ may run under it), notified whenever the counts change; `dead` the ranks
    that have left (see shutdown.py)."""

    def __init__(self, agent, lock, dead):
        self._agent = agent
        self._lock = lock
        self._dead = dead
        self._calls = {}
        self._deadlines = []  # heap of (deadline, msg_id)
        self._late = {}  # msg_id -> dest, for calls that timed out and await their reply
        self._outbox = queue.SimpleQueue()  # control requests the listener sends
        self._draining = False
        self.requests_sent = 0
        self.replies_received = 0  # including late ones, for calls that timed out

    def awaiting(self):
        """Whether any call awaits its reply."""
        return bool(self._calls)

    def register(self, dest, msg_id, what, timeout, keep):
        """A new call to `dest` (`timeout` in seconds, None: the agent's, 0: none); returns
        its RpcFuture. `keep` stays referenced until the reply arrives."""
        future = RpcFuture(self._agent)
        future.to_self = dest == self._agent.rank
        seconds = self._agent.timeout if timeout is None else timeout
        with self._lock:
            self._calls[msg_id] = _Call(future, dest, what, keep)
            self.requests_sent += 1
            if seconds and seconds > 0:
                heapq.heappush(self._deadlines, (time.monotonic() + seconds, msg_id))
        return future

    def withdraw(self, msg_id):
        """Forget a call whose request could not be sent."""
        with self._lock:
            self._calls.pop(msg_id, None)
            self.requests_sent -= 1
            self._lock.notify_all()

    def post(self, dest, kind, payload, what, on_reply=None):
        self._outbox.put((dest, kind, payload, what, on_reply))

    def flush_outbox(self, transport):
        """Send what was posted; returns whether anything was."""
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
                msg_id = new_msg_id()
                header = transport.encode(dest, kind, msg_id, payload)[0]
                future = self.register(dest, msg_id, what, None, None)
                if on_reply is not None:
                    future.add_done_callback(on_reply)
                transport.isend(dest, header)
        finally:
            self._draining = False
        return sent

    def complete(self, source, msg_id, autograd, body, arrays):
        """Complete the call a reply from `source` answers."""
        agent = self._agent
        with self._lock:
            call = self._calls.get(msg_id)
            dest = self._late.get(msg_id) if call is None else call.dest
            if dest is None:
                # Not a reply this agent awaits: the late answer to a call of a worker
                # already counted as gone, or a stray from the previous agent, whose freed
                # communicator MPI may hand to this one (an RRef collected after the last
                # shutdown round sends its delete, and the ack arrives here). Counted, it
                # made replies outnumber requests and the next shutdown wait forever.
                return
            if dest == source:
                del (self._late if call is None else self._calls)[msg_id]
                self.replies_received += 1
                self._lock.notify_all()
        if dest != source:
            # Message ids are no secret (they count up): were any worker's reply taken, it
            # could complete another worker's calls with whatever it likes.
            sys.stderr.write(f"[{agent.info.name}] RPC: dropped a reply from "
                             f"{agent.describe(source)} to a call made to "
                             f"{agent.describe(dest)}\n")
            return
        if call is None:
            return  # timed out: the caller was told already
        try:
            ok, value = agent.codec.decode(source, autograd, body, arrays)
        except Exception as exc:
            call.future.set_exception(exc)
            return
        if ok:
            call.future.set_result(value)
        else:
            call.future.set_exception(
                wire.rebuild_error(value, f"{agent.describe(source)} in {call.what}"))

    def expire(self):
        """Fail the calls whose deadline has passed."""
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
                f"{call.what} on {self._agent.describe(call.dest)} timed out: no reply within "
                f"the timeout (pass timeout= to the call, or rpc_timeout= in the backend "
                f"options)"))

    def fail_calls_to(self, rank, why):
        """Fail the calls to `rank`, which has left: no reply will ever come."""
        with self._lock:
            lost = [(i, c) for i, c in self._calls.items() if c.dest == rank]
            for msg_id, _ in lost:
                del self._calls[msg_id]
            late = [msg_id for msg_id, dest in self._late.items() if dest == rank]
            for msg_id in late:
                del self._late[msg_id]
            self.replies_received += len(lost) + len(late)
            self._lock.notify_all()
        for _, call in lost:
            call.future.set_exception(WorkerUnavailableError(
                f"{call.what}: {self._agent.describe(rank)} became unavailable before "
                f"replying: {why}"))

    def fail_all(self):
        """Fail every call still waiting: this agent is stopping."""
        with self._lock:
            calls, self._calls = list(self._calls.values()), {}
        for call in calls:
            call.future.set_exception(RuntimeError(f"{call.what}: the RPC agent of this worker "
                                                   f"shut down before the reply arrived"))

    def idle(self):
        """Nothing posted is unsent, and every request sent has had its reply."""
        return (self._outbox.empty() and not self._draining
                and self.replies_received == self.requests_sent)

    def wait_until_idle(self):
        with self._lock:
            while not self.idle():
                self._lock.wait(0.01)
