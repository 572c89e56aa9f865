"""DDP's shared buckets across hosts, with the hosts simulated on one machine.

    mpiexec -n 4 python fake_hosts.py 2     # 2 "hosts" of 2 ranks (by faked processor names)
    MPIGRAD_CROSS_HOST_ALLREDUCE=ring mpiexec -n 4 python fake_hosts.py 2   # slices by the ring

Every rank trains the oracle MLP of test_ddp.py on its slice of a global batch; each prints
"OK" once its parameters equal one process's run on the whole batch (float64, 1e-10) and
every rank's bits equal rank 0's, having summed its slice across the hosts.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

from mpi4py import MPI  # noqa: E402

RANKS_PER_HOST = int(sys.argv[1])
MPI.Get_processor_name = lambda: f"host-{MPI.COMM_WORLD.Get_rank() // RANKS_PER_HOST}"

import numpy as np  # noqa: E402

import mpigrad.distributed as dist  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from tests.distributed.ddp._models import MLP, params_of  # noqa: E402
from tests.distributed.ddp.test_ddp import global_batches, oracle, train  # noqa: E402


def main():
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    model = DDP(MLP(seed=rank), bucket_cap_mb=300 / 2**20)
    shared = model.reducer.shared
    assert shared is not None and shared.size == RANKS_PER_HOST, "no shared buckets"
    assert shared.across is not None and shared.across.Get_size() == size // RANKS_PER_HOST
    forced = os.environ.get("MPIGRAD_CROSS_HOST_ALLREDUCE", "auto")
    if forced != "auto":
        assert shared.ring_across_hosts == (forced == "ring")
    assert model.reducer.iteration == 0 and len(model.reducer.buckets) > 2
    batches = global_batches(size)
    train(model, batches, rank)
    mine = params_of(model)
    for got, want in zip(mine, oracle(batches)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    flat = np.concatenate([a.ravel() for a in mine])
    assert np.array_equal(MPI.COMM_WORLD.bcast(flat, root=0), flat), "ranks differ"
    print(f"OK rank {rank}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
