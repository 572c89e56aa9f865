"""Run under MPI on the simulated cluster by test_cluster.py, once per layout of hosts: for
each configuration named on the command line, a few DDP steps of an MLP in float64 from the
same start, each rank on its slice of a global batch. The launch, mpigrad's imports and the
first steps' loading cost more than a configuration, so one launch runs them all, one after
another: a configuration is the MPIGRAD_* variables DDP reads when it is made, set for it
alone.

    cluster_ddp_worker.py OUT_DIR CLUSTER_PREFIX '{"name": {"VARIABLE": "value"}, ...}'

Rank 0 saves to OUT_DIR/<name>.npz the parameters, the hostname of every rank, how each rank's
DDP reduced (jobs/tools/ddp_reduction.py), whether every rank's parameters had the same bits,
and the bytes that crossed the link of the cluster's hosts (<CLUSTER_PREFIX>1 and 2) while
that configuration trained: read between barriers, so each configuration's count is its own,
and after DDP was made, so the count is the gradients' traffic, not a timing of the
allreduces across hosts."""
import json
import os
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "jobs" / "tools"))  # scripts
from cluster import Cluster  # noqa: E402
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


def main(out_dir, cluster_prefix, configurations):
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    comm = MPI.COMM_WORLD
    link = Cluster(prefix=cluster_prefix) if rank == 0 else None
    hosts = comm.gather(MPI.Get_processor_name(), root=0)
    local_sizes = comm.gather(dist.get_local_world_size(), root=0)
    batches = global_batches(size)
    # Each configuration sees its own variables only, as if it had a launch of its own: the
    # ones another configuration sets are unset for it.
    variables = {name for environment in configurations.values() for name in environment}
    outside = {k: v for k, v in os.environ.items() if k not in variables}
    for name, environment in configurations.items():
        if rank == 0:
            print(f"configuration {name}", flush=True)  # names the one a failure is in
        with mock.patch.dict(os.environ, {**outside, **environment}, clear=True):
            ddp = DDP(model(), bucket_cap_mb=BUCKET_CAP_MB)
            comm.Barrier()
            before = link.link_bytes() if link else None
            params = train(ddp, batches, rank * PER_RANK, (rank + 1) * PER_RANK)
            comm.Barrier()
            after = link.link_bytes() if link else None
            reductions = comm.gather(reduction(ddp), root=0)
        flat = np.concatenate([p.ravel() for p in params])
        same_bits = comm.allreduce(int(np.array_equal(comm.bcast(flat, root=0), flat)), MPI.MIN)
        if rank == 0:
            np.savez(Path(out_dir) / f"{name}.npz", hosts=np.array(hosts),
                     local_sizes=np.array(local_sizes),
                     library=np.array(MPI.Get_library_version()),
                     **{key: np.array([r[key] for r in reductions]) for key in reductions[0]},
                     same_bits=np.array(bool(same_bits)),
                     buckets=np.array(len(ddp.reducer.buckets)),
                     link_bytes=np.subtract(after, before),
                     **{f"p{i}": p for i, p in enumerate(params)})
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
