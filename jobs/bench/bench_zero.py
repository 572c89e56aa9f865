"""ZeroRedundancyOptimizer: optimizer-state and gradient bytes per rank, and step time, against
plain DDP with the same optimizer.

    OMP_NUM_THREADS=1 timeout 900 mpiexec -n 2 python jobs/bench/bench_zero.py
    OMP_NUM_THREADS=1 timeout 900 mpiexec -n 3 python jobs/bench/bench_zero.py

Model: the MLP 784-1024-1024-1024-10 (float32), batch 64 per rank, Adam (two state arrays per
parameter). Configurations, run in alternating rounds (the machine may be shared), each the
median over rounds of the slowest rank's mean step:

  DDP + Adam       every rank holds all of Adam's state and steps every parameter
  ZeRO-1           ZeroRedundancyOptimizer(Adam): state sharded, shards broadcast after step
  ZeRO-1, buckets  the same with parameters_as_bucket_view=True (one broadcast per rank)
  ZeRO-2           ZeRO-1 plus DDP's reduce_to_owner_hook (gradients reduced to their owner)

Bytes are counted after a step: Adam's state arrays held by the rank, and the `.grad` arrays
it keeps between steps.
"""
import argparse
from harness import MlpStep, mlp, timed  # first: sets threads

import statistics  # noqa: E402

from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
from mpigrad.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import \
    reduce_to_owner_hook  # noqa: E402
from mpigrad.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from mpigrad.optim import Adam  # noqa: E402


class Run(MlpStep):
    def __init__(self, rank, zero=None):
        model = DDP(mlp(mg))
        if zero is None:
            opt = Adam(model.parameters(), lr=1e-4)
            self.local = opt
        else:
            opt = ZeroRedundancyOptimizer(model.parameters(), Adam, lr=1e-4,
                                          parameters_as_bucket_view=zero == "buckets")
            self.local = opt.optim
            if zero == "stage2":
                model.register_comm_hook(opt, reduce_to_owner_hook)
        super().__init__(rank, model, opt)

    def state_bytes(self):
        return sum(v.numpy().nbytes for values in self.local.state.values()
                   for v in values.values() if isinstance(v, mg.Tensor))

    def gradient_bytes(self):
        return sum(p.grad.numpy().nbytes for p in self.model.parameters() if p.grad is not None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    runs = {"DDP + Adam": Run(rank), "ZeRO-1": Run(rank, "stage1"),
            "ZeRO-1, buckets": Run(rank, "buckets"), "ZeRO-2": Run(rank, "stage2")}
    for run in runs.values():
        for _ in range(3):
            run.step()
    times = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(timed(comm, run.step, args.steps))
    unsharded = runs["DDP + Adam"].state_bytes()
    rows = []
    for name, run in runs.items():
        state = comm.allgather(run.state_bytes())
        grads = comm.allgather(run.gradient_bytes())
        rows.append((name, statistics.median(times[name]) * 1e3, max(state), max(grads)))
    if rank == 0:
        base = rows[0][1]
        print(f"ZeRO benchmark: MLP 784-1024-1024-1024-10, Adam, {size} ranks, median of "
              f"{args.rounds} rounds x {args.steps} steps; unsharded Adam state "
              f"{unsharded / 2**20:.1f} MiB (ideal share 1/N = {unsharded / size / 2**20:.1f})")
        print(f"{'configuration':16s} {'step ms':>8s} {'/ DDP':>6s} {'state MiB (max rank)':>21s} "
              f"{'/ unsharded':>12s} {'grads MiB':>10s}")
        for name, ms, state, grads in rows:
            print(f"{name:16s} {ms:8.1f} {ms / base:6.2f} {state / 2**20:21.2f} "
                  f"{state / unsharded:12.3f} {grads / 2**20:10.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
