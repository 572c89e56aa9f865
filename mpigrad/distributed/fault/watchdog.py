"""A watchdog that tells where a stuck job is stuck, and ends it instead of letting it hang.

A blocking MPI call cannot time out: a rank whose peers are stuck elsewhere (in another
collective, on another group, waiting for a message that never comes, or gone) would wait
forever. Every blocking call this package makes runs inside `blocked(pg, what)`, which
records what the rank waits for, how many times it has waited there (`#n`, the same number
on every rank for the same call) and a deadline (now + the group's timeout, 30 minutes unless
init_process_group says otherwise). Recording costs about a microsecond; the blocking call
itself stays a plain MPI call (polling from Python instead is far slower when ranks share
cores). A daemon thread looks at the records ten times a second:

- Stall report: a rank blocked longer than MPIGRAD_STALL_SECONDS (default 60; 0 turns
  reports off) asks every rank of the group where it is and prints, once per blocked call,
  which ranks wait in which call (with its number and the line of the script that made it)
  and which have not reached it (with the line they are at), as Horovod's stall check does.
  Nothing is aborted: a slow rank may still arrive.
- Timeout: a rank blocked longer than the group's timeout prints the same report, every
  thread's Python stack, and aborts the MPI job, as torch's watchdog does for NCCL.
- Departure: a rank whose interpreter exits (sys.exit(), the end of the script) tells the
  others before MPI_Finalize, which would otherwise wait for them forever. A rank blocked in a
  collective of a group the departed rank belongs to (now, or when it enters one later)
  cannot complete it: it prints which rank left and where the ranks wait, and aborts the job
  at once instead of at the timeout.

The ranks answer each other's questions from this thread, on a communicator of its own (a
duplicate of the default group's, made by init_process_group), so answers come while the
main thread computes or waits in MPI. That needs MPI_THREAD_MULTIPLE; with less, or in a job
of one process, reports show this rank only and departures are not announced.

Test scopes (mpigrad's pytest plugin, `mpigrad.testing.plugin`): while a test runs, the
plugin opens a scope on the ranks' own communicator (`open_scopes`; one for a test's setup and
call, one for its teardown). A rank that leaves the scope early (it failed or skipped) tells
the others (`leave_scope`); from then on their watched calls in that scope raise
`RankLeftTestError` at once, and those already waiting end too, because inside a scope the
waits that `interruptible` and `wait_all` make poll their nonblocking form instead of
blocking in MPI (sleeping between tries: `_poll`). At the scope's deadline this thread
collects where every rank is and raises `TestTimeoutError` in the main thread, wherever it is
(in a wait, or computing).
"""
import atexit
import ctypes
import faulthandler
import os
import sys
import threading
import time

from mpi4py import MPI

from .. import settings
from ..errors import DistError
from .abort import abort_job

STALL_ENV = "MPIGRAD_STALL_SECONDS"
_POLL_SECONDS = 0.1
_ANSWER_SECONDS = 1.0   # how long a report waits for the other ranks to say where they are
_DEPARTED_GRACE_SECONDS = 2.0  # a call still blocked this long after its peer left never ends
# A test whose main thread is still inside its scope this long after the scope's timeout
# raised there is stuck in a call that cannot be interrupted: the job is aborted.
_STUCK_AFTER_TIMEOUT_SECONDS = 10.0
# How a polled wait tries again (see _poll).
_SPIN_SECONDS, _MAX_PAUSE_SECONDS = 1e-3, 1e-3
_LEFT, _QUERY, _ANSWER = 1, 2, 3  # message tags on the watchdog's communicator
_LEFT_SCOPE = 4  # on the scopes' communicator: (scope number, where this rank left)
# mpigrad/ itself: frames inside it are not the caller's line a report shows.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _State:
    """What this process's watchdog knows; one instance, `_dog`."""

    def __init__(self):
        self.waiting = {}   # thread id -> the innermost watch that thread is blocked in now
        self.finished = {}  # thread id -> the last outermost watch it left
        self.counts = {}    # (group name, what) -> how many times this rank entered that watch
        # Guards the control communicator: the watchdog thread and (de)initialisation.
        self.lock = threading.Lock()
        self.thread = None
        self.control = None   # the communicator the ranks' watchdogs talk over
        self.stop = False
        self.departed = {}    # global rank -> when it said it left the job
        self.finalize_hooked = False
        self.stall = None     # MPIGRAD_STALL_SECONDS as last read well
        self.scopes = None    # the test plugin's communicator (see open_scopes)
        self.scope = None     # the test scope open now
        self.scope_exits = {}  # global rank -> (scope number, where) of its last leave_scope


_dog = _State()


def next_number(pg, what):
    """The next number of the call `what` on `pg` (the same on every rank for the same call).
    A collective Work takes its number when it is created, which every rank does, rather than
    when it is waited for, which a rank polling `is_completed()` never does."""
    key = (pg.name, what)
    number = _dog.counts[key] = _dog.counts.get(key, 0) + 1
    return number


class blocked:
    """`with blocked(pg, "all_reduce"): <blocking MPI call>` puts the call under watch.
    `collective=False` for point-to-point calls, which are not numbered (their descriptions
    name peers and tags, which need not repeat) and which concern only `peers` (global ranks:
    a departed rank outside them does not stop the call; None, for a receive from any rank,
    is the whole group). `number`: one taken earlier with `next_number`.

    Watches nest: DistributedDataParallel waits for a comm hook's Future under its own watch
    (a hook may return any Future), and a Work inside it adds its own; reports describe the
    outermost, the deadline is the earliest."""
    __slots__ = ("started", "deadline", "what", "pg", "collective", "peers", "number",
                 "outer", "reported")

    def __init__(self, pg, what, collective=True, peers=None, number=None):
        self.started = time.monotonic()
        self.deadline = self.started + pg.timeout
        self.what, self.pg, self.collective = what, pg, collective
        self.peers = pg.ranks if collective or peers is None else peers
        self.number = number
        self.reported = False

    def __enter__(self):
        if _dog.thread is None:
            _start_thread()
        scope = _dog.scope
        if scope is not None and scope.mine():
            _open_gate(scope)
            if scope.reason is not None:
                raise scope.error()
        if self.collective and self.number is None:
            self.number = next_number(self.pg, self.what)
        thread = threading.get_ident()
        self.outer = _dog.waiting.get(thread)
        _dog.waiting[thread] = self

    def __exit__(self, *exc_info):
        thread = threading.get_ident()
        if self.outer is None:
            del _dog.waiting[thread]
            _dog.finished[thread] = self
        else:
            _dog.waiting[thread] = self.outer
        return False


def stall_seconds():
    return settings.seconds(STALL_ENV, 60, zero_allowed=True)


def start(comm):
    """Called by init_process_group on every rank of `comm` (collective): the communicator the
    ranks' watchdogs talk over, and the thread."""
    stall_seconds()  # a bad setting is an error now, on every rank, not in the thread later
    if comm.Get_size() > 1 and MPI.Query_thread() == MPI.THREAD_MULTIPLE:
        control = comm.Dup()
        _hook_finalize()
        with _dog.lock:
            _dog.control = control
            _dog.departed = {}
        atexit.register(_leave)
        if _dog.thread is None:
            _start_thread()  # to answer the others from the start (else at the first watch)


def stop():
    """Called by destroy_process_group of the default group (collective): free the
    watchdog's communicator."""
    with _dog.lock:
        control, _dog.control = _dog.control, None
    if control is not None:
        atexit.unregister(_leave)
        control.Free()


def _hook_finalize():
    """Make MPI_Finalize, whoever calls it (mpi4py at exit, or the script itself), first wait
    for the watchdog thread to be out of MPI and keep it out: MPI deletes COMM_SELF's
    attributes first thing in MPI_Finalize, on the finalizing thread, so a delete callback
    there runs before MPI goes away. (Checking MPI.Is_finalized() in the thread instead
    races with a Finalize that starts just after the check.)"""
    if not _dog.finalize_hooked:
        keyval = MPI.Comm.Create_keyval(delete_fn=_on_finalize)
        MPI.COMM_SELF.Set_attr(keyval, None)
        _dog.finalize_hooked = True


def _on_finalize(comm, keyval, value):
    with _dog.lock:  # waits for the thread to finish what it is doing with MPI
        _dog.control = None  # freed with everything else by MPI_Finalize
        _dog.scopes = None


def _start_thread():
    _dog.stop = False
    _dog.thread = threading.Thread(target=_watch, name="mpigrad-watchdog", daemon=True)
    _dog.thread.start()


def _watch():
    while not _dog.stop:
        time.sleep(_POLL_SECONDS)
        with _dog.lock:
            _serve()
        now = time.monotonic()
        try:
            stall = _dog.stall = stall_seconds()
        except ValueError:
            # Changed to a bad value after init_process_group checked it (which raised there):
            # this thread keeps the last good one rather than die and stop watching.
            stall = _dog.stall if _dog.stall is not None else 0.0
        for watch in list(_dog.waiting.values()):
            outermost, deadline = watch, watch.deadline
            while outermost.outer is not None:
                outermost = outermost.outer
                deadline = min(deadline, outermost.deadline)
            if now > deadline:
                _abort_on_timeout(outermost)
            left = _departed_peer(outermost, now)
            if left is not None:
                _abort_on_departure(outermost, left)
            if 0 < stall < now - outermost.started and not outermost.reported:
                outermost.reported = True
                _stall_report(outermost, stall)
        scope = _dog.scope
        if scope is not None:
            _watch_scope(scope, now)


# ---------------------------------------------------------------------- talking to the others
def _serve(until=None, asking=None):
    """Answer the other ranks' questions and note departures, on the watchdog's communicator
    and the test scopes'; with `until` (a dict of rank -> answer or None), also collect the
    answers that come over `asking` into it. Called with `_dog.lock` held."""
    status = MPI.Status()
    for control in (_dog.control, _dog.scopes):
        if control is None:  # also after MPI_Finalize began (see _hook_finalize)
            continue
        while control.iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
            source, tag = status.Get_source(), status.Get_tag()
            message = control.recv(source=source, tag=tag)
            if tag == _LEFT:
                _dog.departed[source] = time.monotonic()
            elif tag == _LEFT_SCOPE:
                _dog.scope_exits[source] = message
            elif tag == _QUERY:
                control.send(_where_am_i(), dest=source, tag=_ANSWER)
            elif (tag == _ANSWER and until is not None and control is asking
                  and source in until):
                until[source] = message


def _ask(ranks, control=None):
    """Where the ranks `ranks` (global) are, as answered within _ANSWER_SECONDS over
    `control` (the watchdog's communicator when None); None for a rank that did not answer
    (stopped, dead, or holding the GIL the whole time)."""
    answers = {r: None for r in ranks}
    with _dog.lock:
        control = control or _dog.control
        if control is None:
            return answers
        requests = [control.isend(None, dest=r, tag=_QUERY) for r in ranks]
        deadline = time.monotonic() + _ANSWER_SECONDS
        while any(a is None for a in answers.values()) and time.monotonic() < deadline:
            _serve(until=answers, asking=control)
            time.sleep(0.01)
        MPI.Request.Testall(requests)  # to a live rank, small messages have long gone
    return answers


def _leave():
    """At interpreter exit: tell every other rank this one is gone, so none waits for it."""
    _dog.stop = True
    thread = _dog.thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=2 * _POLL_SECONDS + _ANSWER_SECONDS)
    with _dog.lock:
        control = _dog.control
        if control is None:
            return
        me = control.Get_rank()
        requests = [control.isend(None, dest=r, tag=_LEFT)
                    for r in range(control.Get_size()) if r != me]
        deadline = time.monotonic() + _ANSWER_SECONDS
        while not MPI.Request.Testall(requests) and time.monotonic() < deadline:
            time.sleep(0.01)


# ---------------------------------------------------------------------- where a rank is
def _call_site(frame):
    """The first frame outside mpigrad: the line of the user's script that made the call."""
    innermost = frame
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    frame = frame or innermost
    if frame is None:
        return "?"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _where_am_i():
    """This rank's position: the outermost watch of every blocked thread, and where the main
    thread is and the last call it waited in."""
    now = time.monotonic()
    frames = sys._current_frames()
    waits = []
    for thread, watch in list(_dog.waiting.items()):
        while watch.outer is not None:
            watch = watch.outer
        waits.append((watch.what, watch.pg.name, watch.number, now - watch.started,
                      _call_site(frames.get(thread))))
    main = threading.main_thread().ident
    last = _dog.finished.get(main)
    if last is not None:
        last = (last.what, last.pg.name, last.number, now - last.started)
    return {"waits": waits, "site": _call_site(frames.get(main)), "last": last}


def _call(what, number, group):
    """A watched call as reports name it: `the check before all_reduce #3 on the default
    group` (point-to-point calls have no number)."""
    return f"{what}{'' if number is None else f' #{number}'} on {group}"


def _describe(position):
    if position is None:
        return "no answer (stopped, dead, or busy without releasing the GIL)"
    if position["waits"]:
        return "; ".join(f"waiting in {_call(what, number, group)} for {seconds:.0f} s, "
                         f"called at {site}"
                         for what, group, number, seconds, site in position["waits"])
    text = f"not in any collective: at {position['site']}"
    if position["last"] is not None:
        what, group, number, ago = position["last"]
        text += f" (its last call: {_call(what, number, group)}, started {ago:.0f} s ago)"
    return text


def _report(watch, headline):
    """The headline, then every rank of the watch's group and where it is."""
    me = _my_rank()
    answers = _ask([r for r in watch.pg.ranks if r != me and r not in _dog.departed])
    answers.update((r, None) for r in watch.pg.ranks if r in _dog.departed)
    answers[me] = _where_am_i()
    lines = [headline]
    for r in sorted(answers):
        position = answers[r]
        if position is None and r in _dog.departed:
            lines.append(f"  rank {r}: left the job")
            continue
        mark = ""
        if position is not None and not any(what == watch.what and number == watch.number
                                            for what, _, number, _, _ in position["waits"]):
            mark = "  <- has not reached it"
        lines.append(f"  rank {r}: {_describe(position)}{mark}")
    return me, answers, "\n".join(f"[rank {me}] {line}" for line in lines) + "\n"


def _my_rank():
    control = _dog.control
    return MPI.COMM_WORLD.Get_rank() if control is None else control.Get_rank()


def _stall_report(watch, stall):
    me, answers, text = _report(watch, (
        f"mpigrad.distributed stall: {_call(watch.what, watch.number, watch.pg.name)} has "
        f"waited {stall:g} s ({STALL_ENV}); the job aborts if it is still waiting after "
        f"{watch.pg.timeout:g} s (init_process_group's timeout). Where the ranks are:"))
    # One report per stall: the lowest rank waiting in the same call prints it.
    for r, position in answers.items():
        if r < me and position is not None and any(
                what == watch.what and number == watch.number
                for what, _, number, _, _ in position["waits"]):
            return
    sys.stderr.write(text)
    sys.stderr.flush()


def _abort_on_timeout(watch):
    me = _my_rank()
    _, _, text = _report(watch, (
        f"mpigrad.distributed: {watch.what} on {watch.pg.name} has been blocked on rank {me} "
        f"for longer than the group's timeout ({watch.pg.timeout:g} s). Some rank is stuck "
        f"elsewhere: in another collective, on another group, or waiting for a message that "
        f"never comes. Aborting the MPI job. Where the ranks are:"))
    sys.stderr.write(text + f"[rank {me}] this rank's Python stacks:\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    abort_job()


def _departed_peer(watch, now):
    for rank, when in _dog.departed.items():
        if rank in watch.peers and now - max(when, watch.started) > _DEPARTED_GRACE_SECONDS:
            return rank
    return None


def _abort_on_departure(watch, left):
    _, _, text = _report(watch, (
        f"mpigrad.distributed: rank {left} has left the job (its interpreter exited: "
        f"sys.exit() or the end of its script) while this rank waits in "
        f"{_call(watch.what, watch.number, watch.pg.name)}, which needs rank {left} and so "
        f"can never complete. Aborting the MPI job. Where the ranks are:"))
    sys.stderr.write(text)
    abort_job()


# ---------------------------------------------------------------------- test scopes
class RankLeftTestError(DistError):
    """Another rank left the test this rank is running early (it failed or was skipped),
    so this rank's collectives and messages in the test cannot be answered."""
    __test__ = False  # not a test class, for pytest, in modules that import it


class TestTimeoutError(BaseException):
    """The test ran longer than its timeout. A BaseException, raised into whatever the main
    thread runs, so an `except Exception` in the test cannot swallow it."""
    __test__ = False

    def __init__(self, *args):
        scope = _dog.scope
        super().__init__(*(args or ((scope.timeout if scope is not None else "test timeout"),)))


class _Scope:
    """Part of one test on this rank; see `enter_scope`."""

    def __init__(self, name, number, phase, seconds, deadline, gate):
        self.name, self.number, self.phase, self.seconds = name, number, phase, seconds
        self.deadline = deadline
        self.gate = gate
        self.thread = threading.get_ident()
        self.left = None      # which ranks left the scope and where, once some did
        self.timeout = None   # where the ranks were when the deadline passed
        self.polling = False  # the main thread polls a wait, which checks `reason` itself
        self.injected = False

    @property
    def reason(self):
        return self.timeout or self.left

    @property
    def label(self):
        return f"{self.name} ({self.phase})"

    def mine(self):
        return threading.get_ident() == self.thread

    def error(self):
        if self.timeout is not None:
            return TestTimeoutError(self.timeout)
        return RankLeftTestError(self.left)


def open_scopes(comm):
    """Called by the test plugin on every rank with its own communicator (a duplicate of
    the world's): scopes' messages travel over it and this thread serves it from now on."""
    _hook_finalize()
    with _dog.lock:
        _dog.scopes = comm
    if _dog.thread is None:
        _start_thread()


def enter_scope(name, number, phase, seconds, deadline=None, gate=None):
    """Start scope `number` (the same on every rank for the same part of the same test) on
    the calling thread: `name` and `phase` (set_phase changes it) describe it in errors, and
    it times out at `deadline` (monotonic; now + `seconds` when None), `seconds` being the
    timeout errors quote. `gate()`, if given, runs once, at the first watched call the thread
    makes in the scope (the plugin settles what the test's earlier part left there)."""
    if deadline is None:
        deadline = time.monotonic() + seconds
    _dog.scope = _Scope(name, number, phase, seconds, deadline, gate)


def before_call():
    """Called as a watched call begins, before it reads its group's state (a collective's
    check, which counts the group's collectives): runs the open scope's gate, if any."""
    scope = _dog.scope
    if scope is not None and scope.mine():
        _open_gate(scope)


def _open_gate(scope):
    if scope.gate is not None:
        scope.gate()  # if it raises (the timeout), the next watched call tries again
        scope.gate = None


def set_phase(phase):
    """Name the part of the test that the open scope runs now (`setup`, `call`)."""
    if _dog.scope is not None:
        _dog.scope.phase = phase


def leave_scope(where=None):
    """End the scope on this rank. `where` (how it ended early: "at test_x.py:12: ValueError:
    ...") also tells the others, so that their waits in it end. A rank that simply finished
    tells no one: the others may still have work without it (calls to its RPC agent)."""
    with _dog.lock:
        scope, _dog.scope = _dog.scope, None
        if scope is not None and scope.injected:
            # The timeout's exception, if not yet raised, must not land in the plugin.
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(scope.thread), None)
        comm = _dog.scopes
        if scope is None or comm is None or where is None:
            return
        me = comm.Get_rank()
        message = (scope.number, f"{scope.label} {where}")
        requests = [comm.isend(message, dest=r, tag=_LEFT_SCOPE)
                    for r in range(comm.Get_size()) if r != me]
    MPI.Request.Waitall(requests)  # a few small messages: sent at once


def interruptible(call, start, status=None):
    """`call()`, a blocking MPI call inside a `blocked` watch; inside a test scope (on its
    thread), `start()` instead, its nonblocking form, polled until done so that the scope's
    end on another rank or its timeout raises here rather than leaving the rank blocked."""
    scope = _dog.scope
    if scope is None or not scope.mine():
        return call()
    request = start()
    _poll(lambda: request.Test(status), scope)
    return None


def wait_all(requests, statuses):
    """`MPI.Request.Waitall(requests, statuses)`, polled inside a test scope (see
    `interruptible`)."""
    scope = _dog.scope
    if scope is None or not scope.mine():
        MPI.Request.Waitall(requests, statuses)
        return
    _poll(lambda: MPI.Request.Testall(requests, statuses), scope)


def wait_politely(requests):
    """Wait for `requests` without holding a core: polled (see `_poll`), and inside a test
    scope on its thread, ended by the scope's error. For waits that every rank reaches at
    about the same time (the test plugin's agreements), where MPI's own wait would spin."""
    scope = _dog.scope
    _poll(lambda: MPI.Request.Testall(requests),
          scope if scope is not None and scope.mine() else None)


def _poll(done, scope=None):
    """Call `done()` (an MPI test) until it is true, raising the scope's error (if any) once
    it has one. Between tries the thread sleeps, so that the other threads get the GIL (an
    RPC agent may serve the others meanwhile, as it does while the thread blocks in MPI) and
    the other processes the core: the ranks of a test suite often outnumber the cores, and
    one rank spinning in a wait then delays the rank it waits for. It first tries again at
    once for _SPIN_SECONDS (a peer already there answers within microseconds), then sleeps
    1/32 of the time it has waited, at most _MAX_PAUSE_SECONDS (a late answer costs no more
    than that)."""
    if scope is not None:
        scope.polling = True
    started = time.monotonic()
    try:
        while not done():
            if scope is not None and scope.reason is not None:
                raise scope.error()
            waited = time.monotonic() - started
            time.sleep(0 if waited < _SPIN_SECONDS else min(waited / 32, _MAX_PAUSE_SECONDS))
    finally:
        if scope is not None:
            scope.polling = False


def forget_abandoned_calls():
    """After a test that failed on some rank, between tests: restart the numbering of watched
    calls (the ranks made different numbers of them) and drop any watch of the calling thread
    that the timeout's exception, raised into it anywhere, may have left open."""
    _dog.counts.clear()
    _dog.waiting.pop(threading.get_ident(), None)


def _watch_scope(scope, now):
    """The thread's look at the open test scope: has a rank left it, has it timed out?"""
    if scope.left is None:
        left = sorted((rank, where) for rank, (number, where) in list(_dog.scope_exits.items())
                      if number == scope.number)
        if left:
            scope.left = "; ".join(f"rank {rank} left {where}" for rank, where in left)
    if scope.timeout is None and now > scope.deadline:
        me = _my_rank()
        comm = _dog.scopes
        others = [] if comm is None else [r for r in range(comm.Get_size()) if r != me]
        answers = _ask(others, comm) if others else {}
        answers[me] = _where_am_i()
        text = (f"{scope.label} ran longer than its timeout ({scope.seconds:g} s: "
                f"--mpi-timeout, or @pytest.mark.mpi_timeout(seconds)). Where the ranks were:\n"
                + "\n".join(f"  rank {r}: {_describe(answers[r])}" for r in sorted(answers)))
        with _dog.lock:
            if _dog.scope is scope:
                scope.timeout = text
                if not scope.polling:  # computing, or in a call that cannot be polled
                    scope.injected = True
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(scope.thread), ctypes.py_object(TestTimeoutError))
    elif (scope.timeout is not None and _dog.scope is scope
          and now > scope.deadline + _STUCK_AFTER_TIMEOUT_SECONDS):
        sys.stderr.write(f"[rank {_my_rank()}] mpigrad.testing: {scope.timeout}\n[rank "
                         f"{_my_rank()}] the test is still running {_STUCK_AFTER_TIMEOUT_SECONDS:g} "
                         f"s later, in a call that cannot be interrupted; aborting the MPI job.\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        abort_job()
