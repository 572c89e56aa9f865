"""Run under MPI on the simulated cluster by test_cluster.py: a few DDP steps of an MLP in
float64, each rank on its slice of a global batch. Rank 0 saves the parameters, the hostname
of every rank, how each rank's DDP reduced (jobs/tools/ddp_reduction.py) and whether every
rank's parameters had the same bits, to the .npz named on the command line."""
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "jobs" / "tools"))  # a script
from ddp_reduction import reduction  # noqa: E402

SIZES = (64, 256, 256, 8)   # about 0.6 MB of float64 gradients per step
PER_RANK = 4
STEPS = 3
BUCKET_CAP_MB = 0.1         # several buckets, so their slices' sums across hosts interleave


def model():
    mg.manual_seed(0)
    layers = []
    for i, (n_in, n_out) in enumerate(zip(SIZES, SIZES[1:])):
        layers += [nn.Linear(n_in, n_out)] + ([nn.Tanh()] if i < len(SIZES) - 2 else [])
    return nn.Sequential(*layers).double()


def global_batches(world_size):
    rng = np.random.default_rng(3)
    n = PER_RANK * world_size
    return [(rng.standard_normal((n, SIZES[0])), rng.standard_normal((n, SIZES[-1])))
            for _ in range(STEPS)]


def train(net, batches, lo, hi):
    opt = SGD(net.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches:
        opt.zero_grad()
        ((net(mg.tensor(x[lo:hi])) - mg.tensor(y[lo:hi])) ** 2).mean().backward()
        opt.step()
    return [p._array for p in net.parameters()]


def main(out):
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    ddp = DDP(model(), bucket_cap_mb=BUCKET_CAP_MB)
    params = train(ddp, global_batches(size), rank * PER_RANK, (rank + 1) * PER_RANK)
    comm = MPI.COMM_WORLD
    hosts = comm.gather(MPI.Get_processor_name(), root=0)
    local_sizes = comm.gather(dist.get_local_world_size(), root=0)
    reductions = comm.gather(reduction(ddp), root=0)
    flat = np.concatenate([p.ravel() for p in params])
    same_bits = comm.allreduce(int(np.array_equal(comm.bcast(flat, root=0), flat)), MPI.MIN)
    buckets = len(ddp.reducer.buckets)
    if rank == 0:
        np.savez(out, hosts=np.array(hosts), local_sizes=np.array(local_sizes),
                 library=np.array(MPI.Get_library_version()),
                 **{key: np.array([r[key] for r in reductions]) for key in reductions[0]},
                 same_bits=np.array(bool(same_bits)), buckets=np.array(buckets),
                 **{f"p{i}": p for i, p in enumerate(params)})
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
