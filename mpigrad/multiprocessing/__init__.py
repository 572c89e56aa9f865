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

Unlike torch's, an mpigrad tensor put on a `Queue` or passed as an argument travels as a
copy (pickled), not through shared memory.
"""
import multiprocessing
from multiprocessing import *  # noqa: F401,F403  (torch.multiprocessing re-exports it all)

from .spawn import (ProcessContext, ProcessException, ProcessExitedException,  # noqa: F401
                    ProcessRaisedException, spawn, start_processes)

__all__ = multiprocessing.__all__ + ["ProcessContext", "ProcessException",
                                     "ProcessExitedException", "ProcessRaisedException",
                                     "spawn", "start_processes"]
