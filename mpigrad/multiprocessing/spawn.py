"""torch.multiprocessing.spawn's functions: start processes running `fn(i, *args)` and join
them, turning a child's failure into an exception in the parent.

How a failure reaches the parent: each child has an error file (a path it creates only when
`fn` raises) where it leaves its traceback as text, then exits with code 1. The parent waits on
the children's sentinels; the first child to end with a non-zero code makes `join` end the
others (SIGTERM, then SIGKILL) and raise: `ProcessRaisedException` carrying the traceback when
an error file is there, `ProcessExitedException` with the exit code or the signal's name
otherwise. When several children had failed by then (in an MPI world, one child's failure
makes the others exit), the cause is reported: one that raised, else one killed by a signal.

A child in an MPI world of several processes that raises ends the world at once, as an
uncaught exception would under `init_process_group` (see mpigrad.distributed.fault.abort), instead of
leaving the others blocked in their next collective until the parent ends them.
"""
import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import secrets
import signal
import sys
import tempfile
import time
import traceback
import warnings

_SECRET_ENV = "MPIGRAD_RENDEZVOUS_SECRET"
_PR_SET_PDEATHSIG = 1
_TERMINATE_SECONDS = 30  # how long a child may take to end on SIGTERM before SIGKILL


class ProcessException(Exception):
    """A child process failed: `error_index` is its index (the `i` its `fn` got), `error_pid`
    its process id."""

    def __init__(self, msg, error_index, error_pid):
        super().__init__(msg)
        self.msg, self.error_index, self.error_pid = msg, error_index, error_pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """A child's `fn` raised; the message ends with the child's traceback."""


class ProcessExitedException(ProcessException):
    """A child ended with a non-zero `exit_code` without raising in `fn`: killed by a signal
    (`exit_code` is then minus the signal's number, `signal_name` its name, e.g. "SIGKILL")
    or exiting with that code."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code,
                            self.signal_name)


def _die_with_parent():
    """Linux: have the kernel interrupt this child if the parent dies first, so that no child
    outlives a killed launcher."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGINT)
    except (OSError, AttributeError):  # not Linux
        pass


def _run_child(fn, index, args, error_file, secret, forked):
    _die_with_parent()
    os.environ[_SECRET_ENV] = secret
    try:
        fn(index, *args)
        if forked and _joined_mpi_world():
            _leave_mpi_world()
    except KeyboardInterrupt:
        pass  # the parent ends the children with SIGINT when it dies: not this child's error
    except Exception:  # noqa: BLE001 (every error goes to the parent)
        staging = f"{error_file}.tmp"
        with open(staging, "w") as file:
            file.write(traceback.format_exc())
        os.replace(staging, error_file)  # the parent sees the whole traceback or none
        _end_mpi_world()
        sys.exit(1)


def _joined_mpi_world():
    """Whether this child is in an MPI world that mpigrad's rendezvous formed. Looked up, not
    imported: a child that never imported mpigrad.distributed has no world."""
    rendezvous = sys.modules.get("mpigrad.distributed.launch.rendezvous")
    return rendezvous is not None and rendezvous.joined()


def _end_mpi_world():
    """End this child's MPI world now (the other ranks exit) rather than wait in MPI_Finalize
    for ranks that may be waiting for this one."""
    if _joined_mpi_world():
        sys.stdout.flush()
        sys.stderr.flush()
        sys.modules["mpigrad.distributed.launch.rendezvous"].abort_job(1)


def _leave_mpi_world():
    """A "fork" or "forkserver" child ends with os._exit, without the interpreter's exit and so
    without mpi4py's MPI_Finalize; a rank that ends without it ends its world for the others.
    Do what the exit would (multiprocessing's own exit work, flushing, the goodbye to the
    rendezvous: see `rendezvous.say_goodbye`), then MPI_Finalize, and exit."""
    multiprocessing.util._exit_function()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.modules["mpigrad.distributed.launch.rendezvous"].say_goodbye()
    mpi = sys.modules["mpi4py.MPI"]
    if not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(0)


class ProcessContext:
    """The processes `start_processes` started (`processes`, in index order) and their error
    files (`error_files`)."""

    def __init__(self, processes, error_files):
        self.processes = processes
        self.error_files = error_files
        self.sentinels = {process.sentinel: index for index, process in enumerate(processes)}

    def pids(self):
        return [int(process.pid) for process in self.processes]

    def join(self, timeout=None, grace_period=None):
        """Wait up to `timeout` seconds (None: until one ends) for children to end. Returns True
        once every child has ended with code 0, False if some are still running. When a child
        failed: wait `grace_period` seconds (if given) for the others to end by themselves,
        then SIGTERM those still running, SIGKILL them after another grace period (30 seconds
        when None), and raise ProcessRaisedException or ProcessExitedException for it."""
        if not self.sentinels:
            return True
        failed = []
        for sentinel in multiprocessing.connection.wait(list(self.sentinels), timeout=timeout):
            index = self.sentinels.pop(sentinel)
            self.processes[index].join()
            if self.processes[index].exitcode != 0:
                failed.append(index)
        if not failed:
            if self.sentinels:
                return False
            self._remove_error_files()
            return True
        self._end_all(grace_period)
        error = self._exception(failed)
        self._remove_error_files()
        raise error

    def _end_all(self, grace_period):
        if grace_period is not None:
            self._join_all(grace_period)
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        self._join_all(_TERMINATE_SECONDS if grace_period is None else grace_period)
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join()
        self.sentinels.clear()

    def _join_all(self, seconds):
        deadline = time.monotonic() + seconds
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))

    def _remove_error_files(self):
        for path in self.error_files:
            if os.path.exists(path):
                os.remove(path)
        for folder in {os.path.dirname(path) for path in self.error_files}:
            try:
                os.rmdir(folder)
            except OSError:  # not empty: someone else's files are in it
                pass

    def _exception(self, failed):
        """The exception for the cause: a child that raised (its error file is there even if
        the others, ended by its MPI world's abort, were seen to fail first), else among those
        that had failed on their own (not ended by `_end_all`) one killed by a signal, else the
        first of them."""
        order = failed + [i for i in range(len(self.processes)) if i not in failed]
        raised = [i for i in order if os.path.exists(self.error_files[i])]
        if raised:
            index = raised[0]
            with open(self.error_files[index]) as file:
                trace = file.read()
            return ProcessRaisedException(
                f"\n\n-- Process {index} terminated with the following error:\n{trace}", index,
                self.processes[index].pid)
        index = next((i for i in failed if self.processes[i].exitcode < 0), failed[0])
        code, pid = self.processes[index].exitcode, self.processes[index].pid
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"<Unknown signal {-code}>"
            return ProcessExitedException(f"process {index} terminated with signal {name}",
                                          index, pid, code, name)
        return ProcessExitedException(f"process {index} terminated with exit code {code}",
                                      index, pid, code)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Start `nprocs` processes with `start_method`, process i running `fn(i, *args)`. With
    `join`, wait for all of them (raising as `ProcessContext.join` does) and return None;
    otherwise return their ProcessContext. Every child gets a fresh secret for mpigrad's
    rendezvous in MPIGRAD_RENDEZVOUS_SECRET, the same for all of them."""
    context = multiprocessing.get_context(start_method)
    secret = secrets.token_hex(16)
    folder = tempfile.mkdtemp(prefix="mpigrad-spawn-")
    error_files = [os.path.join(folder, f"error-{i}.txt") for i in range(nprocs)]
    processes = []
    for i in range(nprocs):
        process = context.Process(target=_run_child, daemon=daemon,
                                  args=(fn, i, args, error_files[i], secret,
                                        start_method != "spawn"))
        process.start()
        processes.append(process)
    spawned = ProcessContext(processes, error_files)
    if not join:
        return spawned
    while not spawned.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Start `nprocs` processes running `fn(i, *args)` (i = 0..nprocs-1) with the "spawn"
    start method; see `start_processes`. `fn` must be defined at the top level of a module, to
    be found by the children. Returns None with `join`, the ProcessContext otherwise. Another
    `start_method` is ignored with torch's FutureWarning (use start_processes for it)."""
    if start_method != "spawn":
        warnings.warn(f"This method only supports start_method=spawn (got: {start_method}).\n"
                      "To use a different start_method use:\n\t\t "
                      "mpigrad.multiprocessing.start_processes(...)", FutureWarning, stacklevel=2)
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
