"""mpigrad's RPC against torch.distributed.rpc (TensorPipe) on the same machine, in one run.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 900 mpiexec -n 3 python jobs/bench/bench_rpc.py

(or -n 2: the split model then has two stages).

Ranks and world size come from MPI; TensorPipe rendezvous at MASTER_ADDR=127.0.0.1 and
MASTER_PORT (default 29631). The two agents never run at the same time: while TensorPipe's
runs, even idle, its transport keeps polling and takes a large share of this 2-core machine
from everything else (an idle TensorPipe agent made mpigrad's 128 KB rpc_sync 10-20x slower
here), and it cannot be restarted in the same process. So the run is: half of mpigrad's
rounds, TensorPipe started, all its rounds, TensorPipe shut down, mpigrad's other half (so
drift in the machine's load hits both alike). Each round measures, in turn:

  small rpc_sync      worker0 -> worker1, a 4-element float32 tensor there and back (latency)
  16 MB round trip    worker0 -> worker1, a 16 MB tensor there and back (throughput), and the
                      same bytes as a raw MPI Send/Recv ping-pong (the ceiling)
  distributed step    fwd + dist_autograd.backward + DistributedOptimizer.step (SGD) of a
                      model split over the workers: a Linear+ReLU on each, driven by
                      worker0, batch 64, width 512, float32

Before any of that, with no traffic: how much CPU an idle agent costs (its listener polls
with a sleep in between). Each number is the median over rounds of that round's mean; the
machine may be shared, which is why the configurations alternate within every round. One
compute thread per rank.
"""
import harness  # noqa: F401  (first: one BLAS thread per process)

import argparse  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed.autograd as dist_autograd  # noqa: E402
import mpigrad.distributed.rpc as rpc  # noqa: E402
import mpigrad.nn as nn  # noqa: E402
from mpigrad.distributed.optim import DistributedOptimizer  # noqa: E402

WIDTH, BATCH = 512, 64
BIG = 16 * 2**20 // 4  # float32 elements in 16 MB
COMMAND_TAG = 77
_layers = {}  # this worker's stage of the split model, per framework


def identity(x):
    return x


# ---- the split model, one stage per worker ---------------------------------------------------

def build_stages(rank, torch):
    rng = np.random.default_rng(rank)
    weight = rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / np.sqrt(WIDTH)
    bias = np.zeros(WIDTH, np.float32)
    layer = nn.Linear(WIDTH, WIDTH)
    layer.weight.data[...] = weight
    layer.bias.data[...] = bias
    _layers["mpigrad"] = layer
    if torch is not None:
        t_layer = torch.nn.Linear(WIDTH, WIDTH)
        with torch.no_grad():
            t_layer.weight.copy_(torch.from_numpy(weight))
            t_layer.bias.copy_(torch.from_numpy(bias))
        _layers["torch"] = t_layer


def mpigrad_stage(h):
    return mg.relu(_layers["mpigrad"](h))


def torch_stage(h):
    return _layers["torch"](h).relu()


def mpigrad_param_rrefs():
    return [rpc.RRef(p) for p in _layers["mpigrad"].parameters()]


def torch_param_rrefs():
    import torch.distributed.rpc as trpc  # only where torch runs
    return [trpc.RRef(p) for p in _layers["torch"].parameters()]


# ---- what worker0 times ----------------------------------------------------------------------

IDLE_SECONDS = 3.0


def idle_cpu_fraction():
    """CPU time this process used while its agent sat idle, per second of wall time."""
    time.sleep(1.5)  # past the listener's short-poll windows after start-up
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    time.sleep(IDLE_SECONDS)
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - start
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return used / wall


def timed(fn, repeat):
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def cases(rpc_api, autograd_api, stage, x_small, x_big, x_model, optimizer, size):
    """The timed calls, written once for either library: its `rpc` and `dist_autograd`
    modules, its pipeline `stage`, inputs in its tensors, its DistributedOptimizer."""
    def step():
        with autograd_api.context() as context_id:
            out = stage(x_model)
            for worker in range(1, size):
                out = rpc_api.rpc_sync(worker, stage, args=(out,))
            loss = (out * out).mean()
            autograd_api.backward(context_id, [loss])
            optimizer.step(context_id)

    return {"small": lambda: rpc_api.rpc_sync(1, identity, args=(x_small,)),
            "big": lambda: rpc_api.rpc_sync(1, identity, args=(x_big,)),
            "step": step}


def raw_mpi_round_trip(comm, buffer, repeat):
    """worker0's side of a Send/Recv ping-pong of `buffer` with worker1."""
    comm.send(("pingpong", repeat + 1), 1, COMMAND_TAG)
    start = None
    for i in range(repeat + 1):
        if i == 1:
            start = time.perf_counter()
        comm.Send(buffer, 1, 5)
        comm.Recv(buffer, 1, 5)
    return (time.perf_counter() - start) / repeat


def start_torch(rank, size):
    import torch.distributed.rpc as trpc  # only where torch runs
    trpc.init_rpc(f"worker{rank}", rank=rank, world_size=size)


def serve_commands(comm, torch, rank, size):
    """Workers other than 0: wait (sleeping, not spinning) for worker0's commands."""
    buffer = np.empty(BIG, np.float32)
    while True:
        request = comm.irecv(source=0, tag=COMMAND_TAG)
        while True:
            done, command = request.test()
            if done:
                break
            time.sleep(0.02)  # rarely: each test enters MPI, which the agents share
        if command[0] == "stop":
            return
        if command[0] == "torch":
            import torch.distributed.rpc as trpc  # only where torch runs
            start_torch(rank, size)
            trpc.shutdown()  # serves until worker0 is done with this round
            continue
        for _ in range(command[1]):
            comm.Recv(buffer, 0, 5)
            comm.Send(buffer, 0, 5)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--small-calls", type=int, default=200)
    p.add_argument("--big-calls", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--no-torch", action="store_true", help="mpigrad only")
    args = p.parse_args()
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if size < 2:
        raise SystemExit("bench_rpc.py runs on 2 or more ranks: mpiexec -n 3 python "
                         "jobs/bench/bench_rpc.py")
    comm = world.Dup()
    rpc.init_rpc(f"worker{rank}")
    idle = comm.gather(idle_cpu_fraction(), 0)
    torch = None
    if not args.no_torch:
        import torch
        torch.set_num_threads(1)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29631")
    build_stages(rank, torch)
    comm.Barrier()

    if rank == 0:
        rng = np.random.default_rng(0)
        small = rng.standard_normal(4).astype(np.float32)
        big = rng.standard_normal(BIG).astype(np.float32)
        model_in = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
        ours = cases(
            rpc, dist_autograd, mpigrad_stage,
            mg.from_numpy(small), mg.from_numpy(big), mg.from_numpy(model_in),
            DistributedOptimizer(mg.optim.SGD, [r for w in range(size) for r in
                                                rpc.rpc_sync(w, mpigrad_param_rrefs)], lr=0.01),
            size)
        repeats = {"small": args.small_calls, "big": args.big_calls, "step": args.steps}
        results = {(f, case): [] for f in ("mpigrad", "torch") for case in repeats}
        results[("mpi", "big")] = []
        def mpigrad_round():
            for case, repeat in repeats.items():
                results[("mpigrad", case)].append(timed(ours[case], repeat))
            results[("mpi", "big")].append(raw_mpi_round_trip(comm, big.copy(),
                                                              args.big_calls))

        for _ in range(args.rounds // 2):
            mpigrad_round()
        if torch is not None:
            import torch.distributed.autograd as t_autograd
            import torch.distributed.rpc as trpc
            from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer
            for r in range(1, size):
                comm.send(("torch",), r, COMMAND_TAG)
            start_torch(rank, size)
            t_params = [r for w in range(size) for r in trpc.rpc_sync(w, torch_param_rrefs)]
            theirs = cases(trpc, t_autograd, torch_stage, torch.from_numpy(small),
                           torch.from_numpy(big), torch.from_numpy(model_in),
                           TorchDistributedOptimizer(torch.optim.SGD, t_params, lr=0.01), size)
            for _ in range(args.rounds):
                for case, repeat in repeats.items():
                    results[("torch", case)].append(timed(theirs[case], repeat))
            del theirs, t_params
            trpc.shutdown()
        for _ in range(args.rounds - args.rounds // 2):
            mpigrad_round()
        for r in range(1, size):
            comm.send(("stop",), r, COMMAND_TAG)
        report(results, torch is not None, args.rounds, size)
        print("per-round means, ms (the spread is the machine's load):")
        for (name, case), values in results.items():
            print(f"  {name:8s} {case:6s} " + " ".join(f"{v * 1e3:8.2f}" for v in values))
        print(f"idle agent: {max(idle) * 100:.2f}% of a core (the busiest rank, "
              f"measured over {IDLE_SECONDS:g} s with no traffic)")
    else:
        serve_commands(comm, torch, rank, size)
    rpc.shutdown()


def report(results, with_torch, rounds, size):
    med = {key: statistics.median(values) if values else float("nan")
           for key, values in results.items()}
    bytes_moved = 2 * BIG * 4
    print(f"RPC benchmark: {size} ranks, {rounds} rounds, medians of per-round means "
          f"(shared machine)")
    print(f"{'case':34s} {'mpigrad':>12s} {'torch':>12s} {'mpigrad/torch':>14s}")

    def row(label, key, unit, scale, ratio_of):
        ours = med[("mpigrad", key)] * scale
        theirs = med[("torch", key)] * scale if with_torch else float("nan")
        ratio = ratio_of(ours, theirs)
        print(f"{label:34s} {ours:10.1f}{unit} {theirs:10.1f}{unit} {ratio:13.2f}x")

    row("small rpc_sync latency", "small", "us", 1e6, lambda a, b: a / b)
    gb = lambda s: bytes_moved / s / 1e9  # noqa: E731
    ours_bw, mpi_bw = gb(med[("mpigrad", "big")]), gb(med[("mpi", "big")])
    theirs_bw = gb(med[("torch", "big")]) if with_torch else float("nan")
    print(f"{'16 MB round trip throughput':34s} {ours_bw:8.2f}GB/s {theirs_bw:8.2f}GB/s "
          f"{ours_bw / theirs_bw:13.2f}x")
    print(f"{'  raw MPI Send/Recv, same bytes':34s} {mpi_bw:8.2f}GB/s  mpigrad/raw MPI "
          f"{ours_bw / mpi_bw:.2f}x")
    row("fwd+bwd+DistributedOptimizer.step", "step", "ms", 1e3, lambda a, b: a / b)


if __name__ == "__main__":
    main()
