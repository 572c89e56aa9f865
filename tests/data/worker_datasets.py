"""Datasets for the worker-process tests. They live in an importable module (not a test
file) because spawned workers unpickle them by module name."""
import os
import random
import time

import numpy as np

import mpigrad as mg
from mpigrad.data import Dataset, get_worker_info


class Squares(Dataset):
    """Sample i is (i, i*i); with `work_seconds`, each sample also keeps the CPU busy."""

    def __init__(self, n, work_seconds=0.0):
        self.n, self.work_seconds = n, work_seconds

    def __getitem__(self, index):
        if self.work_seconds:
            end = time.process_time() + self.work_seconds
            while time.process_time() < end:
                pass
        return np.float64(index), index * index

    def __len__(self):
        return self.n


class WhoLoadedMe(Dataset):
    """Sample i records which process and worker made it, and one draw of each random state."""

    def __getitem__(self, index):
        info = get_worker_info()
        return {"index": index, "pid": os.getpid(), "worker": info.id, "seed": info.seed,
                "num_workers": info.num_workers, "python": random.random(),
                "numpy": np.random.random(), "mpigrad": mg.rand(()).item(),
                "environment": set(os.environ), "threads": mg.get_num_threads()}

    def __len__(self):
        return 8


class FailsAt(Dataset):
    def __init__(self, bad_index):
        self.bad_index = bad_index

    def __getitem__(self, index):
        if index == self.bad_index:
            raise KeyError(f"no sample {index}")
        return index

    def __len__(self):
        return 12


class DiesAt(FailsAt):
    def __getitem__(self, index):
        if index == self.bad_index:
            os._exit(3)
        return index


def init_marks_worker(worker_id):
    np.random.seed(1000 + worker_id)


def as_list(samples):
    return samples


class Unpicklable(Dataset):
    """Sample 3 holds a lock, which no pickler can send back to the main process."""

    def __getitem__(self, index):
        import threading
        return threading.Lock() if index == 3 else index

    def __len__(self):
        return 6


def as_is(batch):
    return batch
