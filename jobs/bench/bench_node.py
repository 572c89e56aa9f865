"""One node, every core: each way of spending N cores on the same global batch, in turn.

    python jobs/bench/bench_node.py [--cores 2] [--rounds 5] [--steps 30]

The model is bench_ddp's MLP (784-1024-1024-1024-10, float32, cross-entropy, SGD with
momentum) with a global batch of 64 per core. The ways:

  mpigrad, 1 process x N threads     one process, N BLAS threads, the whole batch
  torch, 1 process x N threads       one process, N intra-op threads, the whole batch
  mpigrad DDP, N ranks x 1 thread    mpiexec -n N, DistributedDataParallel, 64 per rank
  mpigrad no-comm, N ranks x 1       the same ranks' step without DDP (what DDP adds to)
  torch DDP (gloo), N ranks x 1      mpiexec -n N, torch's DDP over gloo

Each round starts every way once, in turn, as its own process(es) (thread counts are fixed
when numpy and torch load); each reports its mean step time over --steps after warm-up, the
slowest rank's under MPI. The table gives samples per second (median over rounds) and, for
the ratios, the median of each round's own ratio, so a slow spell shared by a round's runs
cancels. Run it on a quiet machine: every way uses all N cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PER_CORE_BATCH = 64
WAYS = ("mpigrad, 1 process", "torch, 1 process", "mpigrad DDP", "mpigrad no-comm",
        "torch DDP (gloo)")


def run_worker(way, cores, steps):
    """Start `way` as its own process(es); the seconds per step it reports."""
    threads = cores if way.endswith("1 process") else 1
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    command = [sys.executable, os.path.abspath(__file__), "--worker", way, "--cores",
               str(cores), "--steps", str(steps)]
    if threads == 1:
        command = ["mpiexec", "-n", str(cores)] + command
    out = subprocess.run(["timeout", "-k", "10", "600"] + command, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["seconds_per_step"]


def worker(way, cores, steps):
    """Inside the launched process(es): time `way`'s step and print it as JSON (rank 0)."""
    from harness import SIZES, init_torch_gloo, mlp
    import numpy as np
    import mpigrad as mg
    import mpigrad.nn.functional as F
    from mpigrad.optim import SGD

    distributed = not way.endswith("1 process")
    comm = None
    if distributed:
        import mpigrad.distributed as dist
        from mpi4py import MPI
        dist.init_process_group()
        comm = MPI.COMM_WORLD
    rank = comm.Get_rank() if comm else 0
    batch = PER_CORE_BATCH * (1 if distributed else cores)
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], batch).astype(np.int64)

    if way.startswith("torch"):
        if distributed:
            torch = init_torch_gloo(comm)
            model = torch.nn.parallel.DistributedDataParallel(mlp(torch))
        else:
            import torch  # the oracle, only for its side of the table
            torch.set_num_threads(cores)
            model = mlp(torch)
        loss_fn = torch.nn.functional.cross_entropy
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        from mpigrad.nn.parallel import DistributedDataParallel
        model = mlp(mg)
        if way == "mpigrad DDP":
            model = DistributedDataParallel(model)
        loss_fn, xs, ys = F.cross_entropy, mg.tensor(x), mg.tensor(y)
        opt = SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss_fn(model(xs), ys).backward()
        opt.step()

    for _ in range(5):  # warm-up, and DDP's bucket rebuild after its first step
        step()
    if comm:
        comm.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    if comm:
        seconds = max(comm.allgather(seconds))
    if rank == 0:
        print(json.dumps({"way": way, "seconds_per_step": seconds}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.cores, args.steps)

    seconds = {way: [] for way in WAYS}
    for r in range(args.rounds):
        for way in WAYS:
            seconds[way].append(run_worker(way, args.cores, args.steps))
        print(f"round {r + 1}: " + ", ".join(f"{w} {s[-1] * 1e3:.1f} ms"
                                             for w, s in seconds.items()), flush=True)
    samples = PER_CORE_BATCH * args.cores
    print(f"\nMLP 784-1024x3-10, float32, global batch {samples}, {args.cores} cores, "
          f"{args.rounds} rounds x {args.steps} steps")
    print(f"{'way':40s} {'samples/s':>10s}")
    for way in WAYS:
        layout = (f"1 process x {args.cores} threads" if way.endswith("1 process")
                  else f"{args.cores} ranks x 1 thread")
        print(f"{way.replace(', 1 process', '') + ', ' + layout:40s} "
              f"{samples / statistics.median(seconds[way]):10,.0f}")

    def ratio(a, b):
        return statistics.median(x / y for x, y in zip(seconds[a], seconds[b]))
    print()
    for label, a, b, target in (
            ("mpigrad DDP samples/s / torch 1 process", "torch, 1 process", "mpigrad DDP",
             "  (target >= 1.0)"),
            ("mpigrad DDP samples/s / mpigrad 1 process", "mpigrad, 1 process", "mpigrad DDP", ""),
            ("mpigrad DDP step / its no-comm step", "mpigrad DDP", "mpigrad no-comm",
             "  (target <= 1.10)"),
            ("mpigrad DDP samples/s / torch DDP", "torch DDP (gloo)", "mpigrad DDP", "")):
        print(f"{label + ':':43s} {ratio(a, b):.2f}{target}")


if __name__ == "__main__":
    main()
