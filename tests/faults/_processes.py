"""Jobs whose ranks mostly wait, started so that the waits sleep; the processes of a job the
tests launched, found by the marker in their command lines."""
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

# The jobs of the fault tests spend most of their life waiting: for a timeout, for a rank
# that left, stopped or died. MPICH's waits poll without pause, yielding the core between
# polls, so on a machine with fewer cores than processes a waiting rank still uses its share
# of a core, taken from the rank it waits for and from the other tests. With its heavy yield
# it sleeps between polls instead (MPICH only; other MPIs ignore the variable), for at least
# the thread's timer slack, which a process inherits from the thread that started it: 50 us
# by default, so the rank still polls some 15,000 times a second; with
# WAIT_SLACK_NANOSECONDS, about a thousand. A 3-rank job whose ranks wait 4 s for a sleeping
# one: 2.4-2.9 s of CPU with the heavy yield alone, 1.4-1.7 s with the slack too (1.35 s of
# it starting the ranks). A message that arrives during a pause is seen up to a millisecond
# late: nothing next to the jobs' timeouts.
WAITING_JOB = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}
WAIT_SLACK_NANOSECONDS = 1_000_000
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30  # prctl(2), Linux


def start_waiting_job(command, env, **popen_arguments):
    """subprocess.Popen(command, env=env with WAITING_JOB, **popen_arguments), started with
    WAIT_SLACK_NANOSECONDS of timer slack (Linux), which every process of the job inherits;
    the calling thread's own slack is left as it was."""
    with _timer_slack(WAIT_SLACK_NANOSECONDS):
        return subprocess.Popen(command, env={**env, **WAITING_JOB}, **popen_arguments)


@contextlib.contextmanager
def _timer_slack(nanoseconds):
    if not sys.platform.startswith("linux"):
        yield
        return
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.restype = ctypes.c_int  # also PR_GET's result: the slack (below 2**31 ns)
    before = prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(nanoseconds), 0, 0, 0)
    try:
        yield
    finally:
        prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(before), 0, 0, 0)


def survivors(marker, grace_seconds=5):
    """The pids of the processes whose command line holds `marker` still alive
    `grace_seconds` after the call (the launcher may return while the ranks it killed are
    still exiting)."""
    deadline = time.monotonic() + grace_seconds
    while True:
        found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
        pids = [int(pid) for pid in found.stdout.split()]
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.1)


def kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
