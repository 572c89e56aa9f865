"""The threads that receive the agent's messages, and how long each pauses between polls.

- The listener thread receives everything. It polls with `Improbe`, only yielding the CPU
  between empty polls for 2 ms after a message, then sleeping: 20 us while a reply is
  awaited or a message came in the last 50 ms, then doubling up to 2 ms, and up to 10 ms
  after a second without messages, so an idle agent costs about 1% of a core and a busy one
  answers within microseconds. It runs the requests it receives itself (no hand-over to
  another thread); meanwhile the cover thread does its work (receives, sends the outbox,
  fails calls that time out), sleeping between polls so that it leaves the interpreter to
  the request, from 20 us doubling up to 2 ms while nothing comes.
- A caller thread waiting for its reply (or distributed autograd for its gradients) receives
  (any) messages itself meanwhile (`receive_until`), yielding for its first 2 ms, then
  sleeping 1/32 of the time nothing came, 20 us to 2 ms (so a long wait, for a slow call or
  for gradients, costs little CPU and a reply little delay), and the listener slows down
  rather than compete with it.

Every receiving thread runs the same loop (`_receive_while`), each with its own pauses; what
a message means is the agent's business (serving.py), and the outbox and the calls'
deadlines are kept by whichever thread does the upkeep (`upkeep`).
"""
import os
import sys
import threading
import time
import traceback

from mpi4py import MPI

_MIN_PAUSE, _MAX_PAUSE, _IDLE_PAUSE = 2e-5, 2e-3, 1e-2
_IDLE_AFTER = 1.0  # seconds without messages before polls slow to _IDLE_PAUSE
_STAY_AWAKE = 0.05  # seconds after the last message during which polls stay short
# Seconds after a message (or while awaiting a reply) during which polls only yield the CPU.
# time.sleep has a floor of 50-100 us on Linux (timer slack), where a message between two
# processes of a node takes a few: sleeping between polls made a small call's round trip
# 4x slower than the work it does. A yield lets any other runnable thread or process run.
_SPIN = 2e-3


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


def _waiting_pause(pace):
    """A waiting caller's pause: only yield for _SPIN after the last message, then sleep
    1/32 of the time since (20 us to 2 ms), so a reply waits little longer than it took
    (a 5 ms call: 5.8 ms, against 5.5 with the 20 us pause; doubling, as the cover
    thread's pause, made it 7.7 ms: the caller slept through its reply). A long wait, for
    a slow call or for gradients, then costs a hundred polls, not one every 20-80 us: a
    caller used 0.02 s of CPU waiting for a 1 s call, against 0.22 s."""
    quiet = pace.quiet()
    return 0 if quiet < _SPIN else min(_MAX_PAUSE, max(_MIN_PAUSE, quiet / 32))


class Listener:
    """The receiving threads of one agent, worker `name`: the listener and its cover thread,
    and callers that wait. `lock` is the agent's condition; `poll(status, run_here)` takes
    and handles a message if there is one (see Server.poll); `upkeep()` sends the outbox and
    expires calls, returning whether it sent anything; `awaiting()` says whether a reply is
    awaited; a waiting caller receives in the context `quiet_context()` makes (not in its
    own autograd context)."""

    def __init__(self, name, lock, poll, upkeep, awaiting, quiet_context):
        self._name = name
        self._lock = lock
        self._poll = poll
        self._upkeep_work = upkeep
        self._awaiting = awaiting
        self._quiet_context = quiet_context
        self._receivers = 0  # threads in receive_until: the listener need not hurry then
        self.receiving = threading.local()  # .active: this thread is handling a message
        self._upkeep = threading.Lock()  # one thread at a time sends the outbox, expires calls
        self._covering = threading.Event()  # set while the listener runs a request
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._listen, name=f"rpc-listener-{name}",
                                       daemon=True)
        self.cover = threading.Thread(target=self._cover, name=f"rpc-cover-{name}",
                                      daemon=True)

    def start(self):
        """The cover thread first: the listener may run a request at once, and it is covered
        (and has a thread id to be observed by) from the start."""
        self.cover.start()
        self.thread.start()

    def stopping(self):
        return self._stopping.is_set()

    def _listen(self):
        def pause(pace):
            quiet = pace.quiet()
            if self._receivers:
                return _MAX_PAUSE  # a waiting caller receives; don't compete with it
            if quiet < _SPIN:
                return 0
            if self._awaiting() or quiet < _STAY_AWAKE:
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
            with self._quiet_context():
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
                took, run = self._receive(status, run_here)
                if upkeep:
                    sent = self._keep_up()
            except Exception:  # a receiving thread must survive anything one message does
                sys.stderr.write(f"[{self._name}] RPC receive error:\n"
                                 f"{traceback.format_exc()}")
                continue
            if run is not None:
                self._run_here(run)
            if took or sent:
                pace.seen()
                continue
            seconds = pause(pace)
            if seconds:
                time.sleep(seconds)
            else:
                os.sched_yield()

    def _receive(self, status, run_here):
        self.receiving.active = True
        try:
            return self._poll(status, run_here)
        finally:
            self.receiving.active = False

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
            sys.stderr.write(f"[{self._name}] RPC listener error:\n"
                             f"{traceback.format_exc()}")
        finally:
            with self._lock:  # against stop, which sets it for good
                if not self._stopping.is_set():
                    self._covering.clear()

    def _keep_up(self):
        """`upkeep()`, unless another receiving thread is doing it; returns whether anything
        was sent."""
        if not self._upkeep.acquire(blocking=False):
            return False
        try:
            return self._upkeep_work()
        finally:
            self._upkeep.release()

    def stop(self, graceful):
        """Stop receiving. Not gracefully, a request the listener is running is left behind,
        as those of the pool are."""
        with self._lock:  # against _run_here: the listener is running a request, or never will
            self._stopping.set()
            running = self._covering.is_set()
            self._covering.set()  # wakes the cover thread, and stays set
        self.cover.join()
        if graceful or not running:
            self.thread.join()
