"""Loops that run on several threads, behind a guard that cannot crash or deadlock.

`@parallel(grain)` compiles a loop written with `numba.prange` twice, lazily: a serial twin
(prange is range there) and a threaded one (`parallel=True`). Each call picks one:

- threaded only when `set_num_threads` (kernels/threads.py) allows more than one thread and
  there are at least two `grain`s of work (elements of the largest array), with one thread
  per `grain` at most, since waking threads costs tens of microseconds;
- one threaded loop at a time per process: a call that finds another thread inside one (RPC
  and DDP threads run kernels too) runs the serial twin instead of waiting, so no call waits
  for another and no two parallel regions overlap.

The threading layer is numba's workqueue unless NUMBA_THREADING_LAYER says otherwise. It
ships inside numba's wheel (omp needs the system's libgomp, tbb the tbb wheel), and a
process forked after it ran can start it again (GNU OpenMP kills such a child: "fork() called
from a process already using GNU OpenMP"). It aborts the process when two threads enter it
at once, which the one-at-a-time rule rules out. With another layer chosen, a process forked
after threads ran (a DataLoader worker) runs the serial twins.

The twins compute the same thing element by element: rows or elements split among threads
are each computed as in the serial loop, and reductions add fixed-size blocks (not one
block per thread), so a result does not depend on the number of threads, and is the same
from run to run.
"""
import os
import threading
import types

import numba
import numpy as np

from ..threads import Settings
from ._math import jit

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"
_POOL = numba.config.NUMBA_NUM_THREADS  # numba's threads, fixed at its import


class _Region:
    lock = threading.Lock()
    started = False  # this process has run a threaded loop
    serial_only = False  # forked after another layer's threads ran


def _after_fork_in_child():
    _Region.lock = threading.Lock()  # a parent thread may have held it at the fork
    if _Region.started and numba.threading_layer() != "workqueue":
        _Region.serial_only = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _twin(function):
    """A copy of `function` under another qualified name: numba's cache files are named by
    qualified name and its cache key omits `parallel=`, so the two must not share a name."""
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)
    copy.__qualname__ = function.__qualname__ + "_threaded"
    copy.__module__ = function.__module__
    copy.__doc__ = function.__doc__
    return copy


class Parallel:
    """A loop's serial twin (`serial`, a numba dispatcher), its threaded twin (`threaded`,
    made on first use) and the rule that picks one per call; called as the loop is."""

    def __init__(self, function, grain, partitioned):
        self.function = function
        self.grain = grain
        self.partitioned = partitioned
        self.serial = jit(function)
        self._threaded = None

    @property
    def threaded(self):
        if self._threaded is None:
            self._threaded = jit(_twin(self.function), parallel=True)
        return self._threaded

    def threads_for(self, args):
        """How many threads a call on `args` gets (1: the serial twin)."""
        if Settings.intra_op < 2 or _Region.serial_only:
            return 1
        work = max(arg.size for arg in args if isinstance(arg, np.ndarray))
        return max(1, min(Settings.intra_op, _POOL, work // self.grain))

    def __call__(self, *args):
        if Settings.intra_op > 1:  # the one test a call on one thread pays
            threads = self.threads_for(args)
            if threads > 1 and _Region.lock.acquire(blocking=False):
                try:
                    _Region.started = True
                    loop = self.threaded
                    if numba.get_num_threads() != threads:
                        numba.set_num_threads(threads)  # per Python thread in numba
                    return loop(*args, threads) if self.partitioned else loop(*args)
                finally:
                    _Region.lock.release()
        return self.serial(*args, 1) if self.partitioned else self.serial(*args)


def parallel(grain=1 << 15, partitioned=False):
    """Make a prange loop a `Parallel` kernel. `partitioned`: the loop takes the number of
    threads as its last argument, to cut its work into that many parts (the parts must not
    change its result)."""
    def wrap(function):
        return Parallel(function, grain, partitioned)
    return wrap
