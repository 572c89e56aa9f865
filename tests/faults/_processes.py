"""The processes of a job the tests launched, found by the marker in their command lines, and
the environment for jobs that mostly wait."""
import os
import signal
import subprocess
import time

# For jobs whose ranks spend most of their life waiting: for a timeout, for a rank that left,
# stopped or died. MPICH's waits poll without pause, so on a machine with fewer cores than
# processes a waiting rank takes the core from the rank it waits for and from the other tests;
# with its heavy yield the waits sleep between polls (the ranks of test_faults' jobs used 40
# s of CPU instead of 50). MPICH only; other MPIs ignore it. Not for jobs that train in
# lockstep, where it saved nothing (tests/run.sh's history).
WAITING_JOB = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": 1}


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
