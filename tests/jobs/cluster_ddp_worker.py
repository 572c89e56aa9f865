"""Run under MPI on the simulated cluster by test_cluster.py: a few DDP steps of an MLP in
float64, each rank on its slice of a global batch. Rank 0 saves the parameters and the
hostname of every rank, and whether DDP chose the hierarchical allreduce, to the .npz named
on the command line."""
import sys

import numpy as np
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

SIZES = (64, 256, 256, 8)   # about 0.6 MB of float64 gradients per step
PER_RANK = 4
STEPS = 3


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
    return [p.data for p in net.parameters()]


def main(out):
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    ddp = DDP(model())
    params = train(ddp, global_batches(size), rank * PER_RANK, (rank + 1) * PER_RANK)
    hosts = MPI.COMM_WORLD.gather(MPI.Get_processor_name(), root=0)
    local_sizes = MPI.COMM_WORLD.gather(dist.get_local_world_size(), root=0)
    if rank == 0:
        np.savez(out, hosts=np.array(hosts), local_sizes=np.array(local_sizes),
                 library=np.array(MPI.Get_library_version()),
                 hierarchical=np.array(ddp.reducer._comm_hook[0].hierarchy.spans_shared_hosts),
                 **{f"p{i}": p for i, p in enumerate(params)})
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
