"""mpigrad.multiprocessing: torch.multiprocessing's launch surface.

    import mpigrad.multiprocessing as mp
    mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)   # train(rank, world_size)

`spawn` and `start_processes` (in `spawn`) start `nprocs` processes running `fn(i, *args)`,
and `ProcessContext.join` re-raises a child's exception in the parent as
`ProcessRaisedException` (with the child's traceback) or reports a child killed by a signal
or ending with a non-zero exit code as `ProcessExitedException`, ending the other children.
Everything else is the standard library's `multiprocessing` (`Process`, `Queue`,
`set_start_method`, `get_context`...), as torch re-exports it.

Children that call `mpigrad.distributed.init_process_group` with an `init_method` (or
MASTER_ADDR/MASTER_PORT) and their rank and world size form one MPI world of that size:
importing mpigrad.distributed leaves MPI uninitialised in processes that no MPI launcher
started, and `init_process_group` meets the others through mpigrad's rendezvous before MPI
starts (see mpigrad.distributed.launch.rendezvous). A `Process` of your own in an MPI world needs
the "spawn" start method (as the tutorials set): "fork" and "forkserver" children leave
through `os._exit`, without MPI_Finalize, and a rank that ends without it ends the world for
the others. `start_processes` finalizes MPI itself in children it starts those ways.

A `Process` started inside an mpiexec or srun job (spawned or forked) no longer inherits
its rank's place: it drops the launcher's variables and starts as an MPI world of its own if
it initialises MPI (see `launched`), instead of failing in MPI_Init and ending the job.

Unlike torch's, an mpigrad tensor put on a `Queue` or passed as an argument travels as a
copy (pickled), not through shared memory.
"""
import multiprocessing
import os
from multiprocessing import *  # noqa: F401,F403  (torch.multiprocessing re-exports it all)

from . import launched
from .spawn import (ProcessContext, ProcessException, ProcessExitedException,  # noqa: F401
                    ProcessRaisedException, spawn, start_processes)

__all__ = multiprocessing.__all__ + ["ProcessContext", "ProcessException",
                                     "ProcessExitedException", "ProcessRaisedException",
                                     "spawn", "start_processes"]

# `import mpigrad` runs this: in a launched rank, and in every process it starts, before any
# MPI_Init; a forked child (which imports nothing anew) settles at the fork.
launched.settle()
os.register_at_fork(after_in_child=launched.settle)
