"""The watchdog's numbering of watched calls (the stall reports' `#n`)."""
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad.distributed as dist
from mpigrad.distributed.fault import watchdog


@pytest.mark.mpi(min_size=2)
def test_a_nonblocking_collective_has_the_same_number_on_every_rank_however_it_is_awaited():
    """Rank 0 polls its first all_reduce with is_completed() (no blocking wait), the others
    wait(): the second all_reduce, waited for everywhere, still has one number on all ranks,
    so a stall report matches the ranks waiting in it."""
    rank = dist.get_rank()
    first = dist.all_reduce(np.ones(4), async_op=True)
    if rank == 0:
        while not first.is_completed():
            time.sleep(0.001)
    else:
        first.wait()
    dist.all_reduce(np.ones(4), async_op=True).wait()
    last = watchdog._dog.finished[threading.get_ident()]
    assert last.what == "waiting for MPI Allreduce"
    numbers = MPI.COMM_WORLD.allgather(last.number)
    assert len(set(numbers)) == 1, numbers
