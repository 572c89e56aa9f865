"""A script the launch tests start as several processes without mpiexec: it does what a torch
script does (import, init_process_group(), an all_reduce) and prints what world it got.
`LAUNCH_CHECK_ABORT=r` makes rank r abort the job after the all_reduce (by an exception;
`LAUNCH_CHECK_MPI_ABORT=r`: by MPI_Abort with code 3; `LAUNCH_CHECK_KILL=r`: by SIGKILL).
`LAUNCH_CHECK_LEAVE=r` makes the ranks finalize MPI themselves, rank r then leaving at once
with os._exit as a forked multiprocessing child does, the others a second later."""
import os
import signal
import sys
import time

import mpigrad as mg
import mpigrad.distributed as dist

dist.init_process_group(sys.argv[1] if len(sys.argv) > 1 else None)
total = mg.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {total.item():g} "
      f"local {dist.get_local_world_size()}", flush=True)
if os.environ.get("LAUNCH_CHECK_ABORT") == str(dist.get_rank()):
    raise RuntimeError("this rank fails on purpose")
if os.environ.get("LAUNCH_CHECK_MPI_ABORT") == str(dist.get_rank()):
    from mpi4py import MPI
    MPI.COMM_WORLD.Abort(3)
    # MPICH's MPI_Abort sends the abort to the process manager and returns, leaving the end
    # to it (mpiexec kills the ranks; the rendezvous server's notice ends them): a script that
    # went on to its barrier could meet the others there and end with them, normally, first.
    time.sleep(60)
if os.environ.get("LAUNCH_CHECK_KILL") == str(dist.get_rank()):
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
dist.destroy_process_group()
if "LAUNCH_CHECK_LEAVE" in os.environ:
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    if os.environ["LAUNCH_CHECK_LEAVE"] == str(rank):
        dist.rendezvous.say_goodbye()  # what mpigrad.multiprocessing's forked children do
        MPI.Finalize()
        os._exit(0)
    MPI.Finalize()
    time.sleep(1.0)  # still running, and listening to the rendezvous, when rank r has gone
    print(f"rank {rank} left after MPI_Finalize", flush=True)
