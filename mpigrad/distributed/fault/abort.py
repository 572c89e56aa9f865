"""Abort the whole MPI job when any rank dies of an uncaught exception.

Without this, a rank that raises exits (or hangs in MPI_Finalize) while the other ranks wait
forever in their next collective. `init_process_group` turns it on (unless told otherwise by
its `abort_on_exception` argument or the MPIGRAD_ABORT_ON_EXCEPTION=0 environment variable):
it wraps `sys.excepthook`, so the traceback is printed with the rank in front of every line,
and `abort_job` flushes it and calls MPI.COMM_WORLD.Abort(1), which ends every rank and
makes the launcher exit non-zero. Importing mpigrad.distributed changes nothing. A job of one
process gets Python's usual behaviour. Exceptions that are caught (including by pytest) never
reach the hook.
"""
import os
import sys
import time
import traceback

from mpi4py import MPI

from ..launch import rendezvous
from . import segments

ENV = "MPIGRAD_ABORT_ON_EXCEPTION"
_ON, _OFF = ("1", "true", "on", "yes"), ("0", "false", "off", "no")
_enabled = False
_previous_hook = None
# MPI_Abort has the launcher kill every process at once, and mpiexec may then drop output
# still in the pipes between the ranks and itself; a short pause lets it arrive first.
_OUTPUT_GRACE_SECONDS = 0.5


def set_abort_on_exception(enabled):
    """Turn aborting the job on an uncaught exception on or off (`init_process_group` turns it
    on by default). With it off, an uncaught exception is handled by whatever hook was in
    place before."""
    global _enabled
    _enabled = bool(enabled)
    if _enabled:
        _install()


def setting(argument):
    """Whether to abort on an uncaught exception: `argument` (init_process_group's
    `abort_on_exception`) unless it is None, else MPIGRAD_ABORT_ON_EXCEPTION (default on)."""
    if argument is not None:
        return bool(argument)
    value = os.environ.get(ENV, "1").strip().lower()
    if value not in _ON + _OFF:
        raise ValueError(f"{ENV} must be 1 or 0, got {value!r}")
    return value in _ON


def _install():
    global _previous_hook
    if sys.excepthook is not _abort_hook:
        _previous_hook = sys.excepthook
        sys.excepthook = _abort_hook


def _abort_hook(exc_type, exc, tb):
    if (not _enabled or not MPI.Is_initialized() or MPI.Is_finalized()
            or MPI.COMM_WORLD.Get_size() == 1):
        _previous_hook(exc_type, exc, tb)
        return
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    prefix = f"[rank {rank}] "
    sys.stdout.flush()  # what the rank printed before comes first
    sys.stderr.write(f"{prefix}uncaught exception on rank {rank} of {size}; aborting the MPI "
                     f"job (mpigrad.distributed.set_abort_on_exception(False) turns this off)\n")
    sys.stderr.write("".join(prefix + line + "\n" for line in text.splitlines()))
    abort_job()


def abort_job():
    """Flush this rank's output, give the launcher a moment to pass it on, and abort every
    rank of the job (the launcher then exits non-zero)."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(_OUTPUT_GRACE_SECONDS)
    segments.release()  # those MPI mapped after init_process_group, before MPI_Abort
    if rendezvous.joined():
        rendezvous.abort_job(1)
    MPI.COMM_WORLD.Abort(1)
