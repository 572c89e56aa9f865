"""A script the launch tests start as several processes without mpiexec: it does what a torch
script does (import, init_process_group(), an all_reduce) and prints what world it got.
`LAUNCH_CHECK_ABORT=r` makes rank r abort the job after the all_reduce (by an exception;
`LAUNCH_CHECK_MPI_ABORT=r`: by MPI_Abort with code 3)."""
import os
import sys

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
dist.barrier()
dist.destroy_process_group()
