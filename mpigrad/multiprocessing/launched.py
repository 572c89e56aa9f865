"""Which process an MPI launcher started. mpiexec or srun starts each rank with variables
(PMI_RANK, PMI_FD, ...) that say "you are rank r of this job"; a process the rank starts
itself (`multiprocessing.Process`, spawned or forked, a subprocess running Python) inherits
them, and if it then initialises MPI it claims the rank's place: MPI_Init fails (the PMI
connection is the parent's) and the launcher ends or hangs the whole job.

So the first process of a job that imports mpigrad records its pid in
`MPIGRAD_LAUNCHED_PID`; a process whose parent or grandparent is that pid is one the rank
started (directly, through a shell, or through multiprocessing's forkserver), and drops the
launcher's variables from its environment as mpigrad is imported (or, for a forked child,
at the fork), before anything can initialise MPI: it then starts as a one-process world of
its own, as DataLoader workers do. A rank of a new launch nested in a rank is three
generations below it (mpiexec, its proxy, the rank) and records itself instead.
"""
import os

from ..launchers import LAUNCHER_PREFIXES, mpi_launcher

OWNER = "MPIGRAD_LAUNCHED_PID"


def settle():
    """Record this process as the launched rank, or leave the launcher's variables behind if
    the launched rank started it."""
    if mpi_launcher() is None:
        return
    owner = os.environ.get(OWNER)
    if owner in (str(os.getppid()), _grandparent()):
        for name in [n for n in os.environ if n.startswith(LAUNCHER_PREFIXES)]:
            del os.environ[name]
        del os.environ[OWNER]
    elif owner != str(os.getpid()):
        os.environ[OWNER] = str(os.getpid())


def _grandparent():
    """The parent's parent's pid as a string (Linux's /proc), or None where unknown."""
    try:
        with open(f"/proc/{os.getppid()}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return None
