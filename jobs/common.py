"""What the training jobs share: argument types, rank-0 logging, the agreed stop on a signal
(preemption), and the checkpoint directory check. Import it as `common` (the jobs run from
this folder, which Python puts first on sys.path)."""
import argparse
import os
import signal
import tempfile

import numpy as np

import mpigrad.distributed as dist
from mpigrad.serialization import remove_stale_temporaries

# The exit code of a job stopped by SIGUSR1/SIGTERM after checkpointing: requeue me.
PREEMPTED_EXIT_CODE = 99


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def log(rank, message):
    if rank == 0:
        print(f"[rank {rank}] {message}", flush=True)


class StopFlag:
    """Set by SIGUSR1/SIGTERM; ranks agree on it once per step so they stop together."""

    def __init__(self):
        self.local = np.zeros(1, np.int64)
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.local[0] = 1

    def agreed(self):
        flag = self.local.copy()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag[0])


def check_checkpoint_directory(directory, rank):
    """Create `directory` and prove rank 0 can write there, before any training is spent;
    also remove the temporaries of saves that were killed. Every rank learns the outcome."""
    problem = [None]
    if rank == 0:
        try:
            os.makedirs(directory, exist_ok=True)
            remove_stale_temporaries(directory)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
                pass
        except OSError as err:
            problem[0] = (f"checkpoint directory {directory} is not writable ({err}); choose "
                          "another --checkpoint DIR or fix its permissions")
    dist.broadcast_object_list(problem)
    return problem[0]
