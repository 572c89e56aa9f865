"""DataLoader worker processes: loading batches in parallel with training.

Lifecycle of one multi-process pass (`_WorkerPool` plus `_MultiProcessIterator`):

1. start: `num_workers` processes, each with its own index queue and one shared
   result queue. Worker `i` seeds `random`, mpigrad and numpy's global state from
   `base_seed + i` exactly as PyTorch does (numpy's from a SeedSequence of
   `[i, base_seed's two 32-bit halves, 0]`), publishes `get_worker_info()`, then
   runs `worker_init_fn(i)`.
2. prefetch: `prefetch_factor` batches of indices per worker are sent at once,
   round-robin; every batch received sends the next one, so each worker always has
   work queued.
3. deliver: results arrive in any order and are handed out in sampler order. Over an
   `IterableDataset` every worker reads its own copy, and batch `k` is asked of the k-th
   active worker in turn; a worker whose stream ends answers `EndOfStream`, is asked no
   more, and its unanswered requests are skipped (torch's order, batch for batch).
4. shut down: at the end of the pass (unless `persistent_workers`), on an
   exception (a worker's is re-raised in the main process with its traceback), and
   when the iterator or the loader is garbage-collected: workers get a stop message,
   are joined for a few seconds, then terminated.

Start method: torch's, the platform's default (`fork` on Linux), while this process has
not initialised MPI, so a script without `if __name__ == "__main__":` works as with torch
(a spawned worker re-imports the main script, re-running its top level). Once MPI is
initialised (importing `mpigrad.distributed` under a launcher does it, before a loader
usually iterates), workers are spawned and `fork` is refused: forking an MPI process
copies its shared-memory segments, registered memory and network endpoints into a child
that must not use them, and copies the locks of threads (MPI's progress thread, mpigrad's
watchdog) that do not exist in the child: Open MPI warns about it, and MPICH's
shared-memory transport can be corrupted by it. A spawned worker is a fresh interpreter;
as with PyTorch's `spawn`, the dataset, `collate_fn` and `worker_init_fn` must be
picklable, and the main script's top level guarded. Either way the launcher's variables
(PMI, PMIx, Open MPI, Hydra, torchrun's rank variables) are removed from a worker's
environment, so if it imports `mpigrad.distributed` it starts as its own one-process MPI
world instead of claiming a rank of the job. `multiprocessing_context` may name any start
method (or be a context), `fork` only while MPI is not initialised.
"""
import multiprocessing
import os
import pickle
import queue
import random
import sys
import threading
import traceback
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

import numpy as np

from ..kernels.threads import set_num_threads
from ..launchers import launcher_variables
from ..random import manual_seed

_POLL_SECONDS = 1.0
_JOIN_SECONDS = 5.0


@dataclass(frozen=True)
class WorkerInfo:
    """What `get_worker_info()` returns inside a worker process."""
    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info = None


def get_worker_info():
    """This worker's `WorkerInfo` in a DataLoader worker process, None elsewhere."""
    return _worker_info


def numpy_seed(base_seed, worker_id):
    """The 128-bit state PyTorch gives numpy's global generator in a worker: numpy's own
    SeedSequence hash of `[worker_id, low 32 bits, high 32 bits, 0]`."""
    mask = 0xFFFFFFFF
    entropy = [worker_id, base_seed & mask, (base_seed >> 32) & mask, 0]
    return np.random.SeedSequence(entropy).generate_state(4)


class EndOfStream:
    """A fetcher's answer once its iterable dataset's stream has ended."""


class _Failure:
    """An exception raised in a worker, carried to the main process as text."""

    def __init__(self, worker_id, exception):
        self.worker_id = worker_id
        self.type_name = type(exception).__name__
        self.text = "".join(traceback.format_exception(exception))

    def reraise(self):
        raise RuntimeError(f"Caught {self.type_name} in DataLoader worker process "
                           f"{self.worker_id}.\nOriginal {self.text}")


def _pickled_result(pass_id, position, batch, worker_id):
    """The result as bytes, pickled here rather than by the queue's feeder thread: that
    thread only prints a batch it cannot pickle and drops it, leaving the main process
    waiting for it forever."""
    try:
        pickled = ForkingPickler.dumps((pass_id, position, batch))
    except Exception as exception:
        pickled = ForkingPickler.dumps((pass_id, position, _Failure(worker_id, exception)))
    return bytes(pickled)  # dumps gives a memoryview, which the queue cannot pickle


def _worker_loop(dataset, collate, fetcher, index_queue, result_queue, stop, parent_alive,
                 parent_alive_writer, base_seed, init_fn, worker_id, num_workers):
    global _worker_info
    # A forked worker inherits the write end of `parent_alive` (a spawned one is handed it);
    # only the main process may hold it, or the pipe never ends when that process dies.
    parent_alive_writer.close()
    seed = base_seed + worker_id
    # As torch's workers: the main process's threads already use every core, and a worker
    # that started as many again would oversubscribe them num_workers times over.
    set_num_threads(1)
    try:
        random.seed(seed)
        manual_seed(seed)
        np.random.seed(numpy_seed(base_seed, worker_id))
        _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as exception:  # reported when the first batch is asked for
        result_queue.put(_pickled_result(None, None, _Failure(worker_id, exception), worker_id))
        return
    ended_pass = None
    while not stop.is_set():
        # The main process holds the only write end of `parent_alive` and never writes: the
        # pipe becomes readable (end of file) exactly when that process is gone (killed with
        # -9, say). Then nobody will ever ask this worker for a batch or stop it, so it leaves
        # by itself. (os.getppid() would race: a worker still starting when its parent dies
        # already sees its new parent.)
        if parent_alive.poll():
            # Unsent results would make exit wait for a reader that no longer exists.
            result_queue.cancel_join_thread()
            return
        try:
            task = index_queue.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            continue
        if task is None:
            return
        pass_id, position, indices = task
        if pass_id == ended_pass:  # the main process skips the requests it sent meanwhile
            continue
        try:
            batch = fetcher.fetch(dataset, collate, pass_id, indices)
        except Exception as exception:
            batch = _Failure(worker_id, exception)
        if isinstance(batch, EndOfStream):
            ended_pass = pass_id
        result_queue.put(_pickled_result(pass_id, position, batch, worker_id))


class _LauncherFreeEnvironment:
    """os.environ without the MPI launcher's and torchrun's variables, while workers start."""
    _lock = threading.Lock()

    def __enter__(self):
        self._lock.acquire()
        self.saved = {name: os.environ[name] for name in launcher_variables()}
        for name in self.saved:
            del os.environ[name]

    def __exit__(self, *exc_info):
        os.environ.update(self.saved)
        self._lock.release()


def mpi_initialized():
    """Whether this process has initialised MPI (and not finalised it)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()


def start_method(name):
    """The multiprocessing context for workers: `name` (a start method or a context), else
    the platform's default (torch's choice) while MPI is not initialised here and spawn once
    it is; fork is refused while MPI is initialised."""
    if name is None:
        return multiprocessing.get_context("spawn" if mpi_initialized() else None)
    context = multiprocessing.get_context(name) if isinstance(name, str) else name
    if context.get_start_method() == "fork" and mpi_initialized():
        raise ValueError("multiprocessing_context='fork' is refused: this process has "
                         "initialised MPI, and forking it copies MPI's state into the "
                         "workers; use 'spawn' (the default then) or 'forkserver'")
    return context


class _WorkerPool:
    """The worker processes of one DataLoader, and how to stop them."""

    def __init__(self, loader, base_seed, fetcher):
        self.index_queues, self.processes = [], []
        context = start_method(loader.multiprocessing_context)
        self.result_queue = context.Queue()
        self.stop = context.Event()
        self.parent_alive, self.parent_alive_writer = context.Pipe(duplex=False)
        try:
            with _LauncherFreeEnvironment():
                for worker_id in range(loader.num_workers):
                    index_queue = context.Queue()
                    self.index_queues.append(index_queue)
                    process = context.Process(
                        target=_worker_loop, daemon=True,
                        name=f"mpigrad-data-worker-{worker_id}",
                        args=(loader.dataset, loader.collate_fn, fetcher, index_queue,
                              self.result_queue, self.stop, self.parent_alive,
                              self.parent_alive_writer, base_seed,
                              loader.worker_init_fn,
                              worker_id, loader.num_workers))
                    process.start()  # pickles the dataset: may fail for this worker only
                    self.processes.append(process)
        except BaseException:
            self.shutdown()
            raise
        self.timeout = loader.timeout
        self.pass_id = 0

    def receive(self):
        """The next result from any worker; an error if a worker died or `timeout` passed."""
        waited = 0.0
        while True:
            try:
                return pickle.loads(self.result_queue.get(timeout=_POLL_SECONDS))
            except queue.Empty:
                waited += _POLL_SECONDS
            dead = [p for p in self.processes if not p.is_alive()]
            if dead:
                codes = ", ".join(f"pid {p.pid} with exit code {p.exitcode}" for p in dead)
                raise RuntimeError(f"DataLoader worker exited unexpectedly ({codes}); a "
                                   "worker killed by a signal may have run out of memory")
            if self.timeout and waited >= self.timeout:
                raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds "
                                   "waiting for a batch from its workers")

    def shutdown(self):
        if not self.index_queues:
            return
        self.stop.set()
        for index_queue in self.index_queues:
            index_queue.put(None)
        for process in self.processes:
            process.join(_JOIN_SECONDS)
            if process.is_alive():
                process.terminate()
                process.join(_JOIN_SECONDS)
        for q in (*self.index_queues, self.result_queue):
            q.cancel_join_thread()
            q.close()
        self.parent_alive.close()
        self.parent_alive_writer.close()
        self.processes, self.index_queues = [], []

    def __del__(self):
        # Interpreter shutdown may already have torn down what shutdown() needs; the
        # workers are daemons and die with the process then.
        if sys is not None and not sys.is_finalizing():
            self.shutdown()


class MultiProcessIterator:
    """One pass over a DataLoader whose batches come from worker processes."""

    def __init__(self, loader, pool, batches):
        self.pool = pool
        self.own_pool = not loader.persistent_workers
        pool.pass_id += 1
        self.pass_id = pool.pass_id
        self.batches = enumerate(batches)
        self.next_position = 0
        self.sent = 0
        self.ready = {}
        self.worker_of = {}
        # False once a worker's iterable stream has ended: it is sent nothing more.
        self.active = [True] * len(pool.processes)
        self.next_worker = 0
        for _ in range(loader.prefetch_factor * len(pool.processes)):
            self._send_next()

    def _send_next(self):
        if not any(self.active):
            return
        task = next(self.batches, None)
        if task is None:
            return
        while not self.active[self.next_worker]:
            self.next_worker = (self.next_worker + 1) % len(self.active)
        position, indices = task
        self.pool.index_queues[self.next_worker].put((self.pass_id, position, indices))
        self.worker_of[position] = self.next_worker
        self.next_worker = (self.next_worker + 1) % len(self.active)
        self.sent += 1

    def __iter__(self):
        return self

    def __next__(self):
        if self.pool is None:
            raise StopIteration
        try:
            while self.next_position not in self.ready:
                if self.next_position == self.sent:
                    self._finish()
                    raise StopIteration
                if not self.active[self.worker_of[self.next_position]]:
                    # Sent to a worker whose stream ended since: never answered.
                    del self.worker_of[self.next_position]
                    self.next_position += 1
                    continue
                pass_id, position, batch = self.pool.receive()
                if isinstance(batch, _Failure):
                    batch.reraise()
                if pass_id != self.pass_id:  # left over from an abandoned pass
                    continue
                if isinstance(batch, EndOfStream):
                    self.active[self.worker_of[position]] = False
                    self._send_next()
                else:
                    self.ready[position] = batch
        except StopIteration:  # the pass's normal end: a persistent pool stays up
            raise
        except BaseException:
            self._finish(error=True)
            raise
        batch = self.ready.pop(self.next_position)
        del self.worker_of[self.next_position]
        self.next_position += 1
        self._send_next()
        return batch

    def _finish(self, error=False):
        if self.pool is not None and (self.own_pool or error):
            self.pool.shutdown()
        self.pool = None

    def __del__(self):
        if self.own_pool and self.pool is not None and not sys.is_finalizing():
            self.pool.shutdown()
