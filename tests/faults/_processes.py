"""The processes of a job the tests launched, found by the marker in their command lines."""
import os
import signal
import subprocess
import time


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
