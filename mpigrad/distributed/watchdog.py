"""A watchdog that ends the job when a rank stays blocked in one communication call too long.

A blocking MPI call cannot time out: a rank whose peers are stuck elsewhere (in another
collective, on another group, waiting for a message that never comes) would wait forever.
Every blocking call this package makes runs inside `blocked(pg, what)`, which records a
deadline (now + the group's timeout, 30 minutes unless init_process_group says otherwise).
A daemon thread looks at the deadlines ten times a second; when one has passed, it prints
what the rank was waiting for and every thread's Python stack, then aborts the MPI job, as
torch's watchdog does for NCCL. Recording a deadline costs well under a microsecond; the
blocking call itself stays a plain MPI call (polling from Python instead is far slower when
ranks share cores).
"""
import faulthandler
import sys
import threading
import time

from mpi4py import MPI

from .abort import abort_job

_POLL_SECONDS = 0.1
_waiting = {}  # thread id -> (deadline, what, group), for threads blocked right now
_thread = None


class blocked:
    """`with blocked(pg, "all_reduce"): <blocking MPI call>` puts the call under watch.

    Watches nest: DistributedDataParallel waits for a comm hook's Future under its own watch
    (a hook may return any Future), and a Work inside it adds its own; leaving the inner one
    puts the outer one back."""
    __slots__ = ("_entry", "_outer")

    def __init__(self, pg, what):
        self._entry = (time.monotonic() + pg.timeout, what, pg)
        self._outer = None

    def __enter__(self):
        if _thread is None:
            _start()
        thread = threading.get_ident()
        self._outer = _waiting.get(thread)
        _waiting[thread] = self._entry

    def __exit__(self, *exc_info):
        thread = threading.get_ident()
        if self._outer is None:
            _waiting.pop(thread, None)
        else:
            _waiting[thread] = self._outer
        return False


def _start():
    global _thread
    _thread = threading.Thread(target=_watch, name="mpigrad-watchdog", daemon=True)
    _thread.start()


def _watch():
    while True:
        time.sleep(_POLL_SECONDS)
        now = time.monotonic()
        for deadline, what, pg in list(_waiting.values()):
            if now > deadline:
                _abort(what, pg)


def _abort(what, pg):
    rank = MPI.COMM_WORLD.Get_rank()
    sys.stderr.write(
        f"[rank {rank}] mpigrad.distributed: {what} on {pg.name} has been blocked on rank "
        f"{rank} for longer than the group's timeout ({pg.timeout:g} s). Some rank is stuck "
        f"elsewhere: in another collective, on another group, or waiting for a message that "
        f"never comes. Aborting the MPI job; this rank's Python stacks:\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    abort_job()
