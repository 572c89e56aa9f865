"""DistributedDataParallel step time against PyTorch DDP (gloo) and against no communication.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 900 mpiexec -n 2 python jobs/bench/bench_ddp.py

Model: the 4-layer MLP 784-1024-1024-1024-10 (float32, ReLU, cross-entropy), batch 64 per rank,
SGD with momentum, one BLAS thread per rank. Configurations are run in alternating rounds (the
machine may be shared) and each reports the median over rounds of the slowest rank's mean
step time:

  mpigrad, no communication     the same training step without DDP
  mpigrad DDP                   DistributedDataParallel (bucket_cap_mb as given)
  PyTorch DDP (gloo)            torch.nn.parallel.DistributedDataParallel, same model and sizes

  mpigrad DDP through MPI         the same, with MPIGRAD_DDP_SHARED_MEMORY=0: one Iallreduce per
                                bucket instead of the shared-memory buckets of one host

With --bound, two more, which tell what DDP's extra time is made of (their gradients are
wrong: only their time means something):

  DDP without waiting           DDP with every wait taken out: no flags waited for and no
                                end-of-backward agreement, so ranks sum whatever the others'
                                copies hold at that moment
  DDP without the sums          DDP whose shared reduction sums and writes nothing: what is
                                left is the copy into the buckets, the flags and bookkeeping

Then: the bucketed allreduce (DDP's bucket layout, one Iallreduce per bucket, in order, then
Waitall) against one MPI Allreduce of the same total bytes; the cost of the end-of-backward
agreement (a 16-byte Allreduce on the control communicator); from DDP's timeline, how much of
the communication time was hidden behind backward; and where DDP's extra time per step goes,
from timers put around the Reducer's and the shared-memory reduction's functions for a few
more steps (each part's own time, without the parts it calls).
"""
from harness import (BATCH, SIZES, MlpStep, TorchRun, init_torch_gloo,  # first: sets threads
                     mlp, timed)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
from mpigrad.distributed.algorithms.ddp_comm_hooks import (  # noqa: E402
    shared_memory as shared_memory_hook)
from mpigrad.distributed.ddp.reducer import Reducer  # noqa: E402
from mpigrad.distributed.ddp.timeline import summarize  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from mpigrad.optim import SGD  # noqa: E402


class MpigradRun(MlpStep):
    def __init__(self, rank, ddp, bucket_cap_mb, shared_memory=True):
        model = mlp(mg)
        if ddp:
            with mock.patch.dict(os.environ,
                                 {shared_memory_hook.ENV: "1" if shared_memory else "0"}):
                model = DDP(model, bucket_cap_mb=bucket_cap_mb)
        super().__init__(rank, model, SGD(model.parameters(), lr=0.01, momentum=0.9))


class PatchedDdpRun(MpigradRun):
    """DDP whose step runs with `patches`, (owner, name, replacement) triples, in place."""

    def __init__(self, rank, bucket_cap_mb, patches):
        super().__init__(rank, True, bucket_cap_mb)
        self.patches = patches

    def step(self):
        with contextlib.ExitStack() as patched:
            for owner, name, replacement in self.patches:
                patched.enter_context(mock.patch.object(owner, name, replacement))
            super().step()


def _nothing(*args, **kwargs):
    return None


WITHOUT_WAITING = [(shared_memory_hook, "_wait_for", lambda *args: True),
                   (Reducer, "_agree", _nothing)]
WITHOUT_SUMS = [(shared_memory_hook, "_sum_over", _nothing),
                (shared_memory_hook, "_copy_out", _nothing)]


# The parts of DDP's step the breakdown times, by what they do.
PARTS = {(Reducer, "_mark_ready"): "dividing each gradient into its bucket",
         (Reducer, "_launch"): "starting each bucket's reduction",
         (Reducer, "_progress"): "polling reductions from gradient hooks",
         (shared_memory_hook, "_sum_over"): "summing this rank's slices (shared memory)",
         (shared_memory_hook, "_copy_out"): "writing the sums into the others' copies",
         (shared_memory_hook, "_wait_for"): "waiting for the other ranks' flags",
         (Reducer, "_agree"): "end-of-backward agreement (waits for the slowest)",
         (Reducer, "_finalize"): "end of backward: unpacking .grad, records"}


@contextlib.contextmanager
def timed_parts(seconds):
    """Add each PARTS function's own time (what the parts it calls took is theirs) to
    `seconds`, while inside."""
    stack = []

    def timer(function, label):
        def timed_function(*args, **kwargs):
            stack.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                inner = stack.pop()
                seconds[label] = seconds.get(label, 0.0) + spent - inner
                if stack:
                    stack[-1] += spent
        return timed_function
    originals = [(owner, name, getattr(owner, name)) for owner, name in PARTS]
    for owner, name, function in originals:
        setattr(owner, name, timer(function, PARTS[owner, name]))
    try:
        yield
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)


def bench_bucketed_allreduce(comm, reducer, repeats):
    """Seconds for DDP's buckets reduced one Iallreduce each (in order, then Waitall), and for
    one Allreduce of the same total bytes."""
    buffers = [np.ones(b.size, b.dtype) for b in reducer.buckets]
    flat = np.ones(sum(b.size for b in buffers), buffers[0].dtype)
    data_comm = reducer.channel.comm

    def bucketed():
        MPI.Request.Waitall([data_comm.Iallreduce(MPI.IN_PLACE, [b, MPI.FLOAT], MPI.SUM)
                             for b in buffers])

    def raw():
        data_comm.Allreduce(MPI.IN_PLACE, [flat, MPI.FLOAT], MPI.SUM)

    bucketed()
    raw()
    results = {}
    for name, fn in (("bucketed", bucketed), ("raw", raw)) * 2:
        results.setdefault(name, []).append(timed(comm, fn, repeats))
    return min(results["bucketed"]), min(results["raw"]), flat.nbytes, len(buffers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--bound", action="store_true",
                        help="also run the two configurations that bound DDP's extra time")
    args = parser.parse_args()

    dist.init_process_group()
    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    torch = None if args.no_torch else init_torch_gloo(comm)

    runs = {"mpigrad, no communication": MpigradRun(rank, False, args.bucket_cap_mb),
            "mpigrad DDP": MpigradRun(rank, True, args.bucket_cap_mb),
            "mpigrad DDP through MPI": MpigradRun(rank, True, args.bucket_cap_mb,
                                                  shared_memory=False)}
    if args.bound:
        runs["DDP without waiting"] = PatchedDdpRun(rank, args.bucket_cap_mb, WITHOUT_WAITING)
        runs["DDP without the sums"] = PatchedDdpRun(rank, args.bucket_cap_mb, WITHOUT_SUMS)
    if torch is not None:
        runs["PyTorch DDP (gloo)"] = TorchRun(torch, rank)
    ddp = runs["mpigrad DDP"].model
    timeline = ddp.enable_timeline(None)
    for run in runs.values():  # warm-up (and DDP's bucket rebuild after step 1)
        for _ in range(3):
            run.step()
    timeline.events.clear()
    times = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(timed(comm, run.step, args.steps))
    step_time = {name: statistics.median(t) for name, t in times.items()}
    parts = {}
    with timed_parts(parts):
        timed(comm, runs["mpigrad DDP"].step, args.steps)
    parts = {label: comm.allreduce(t) / size / args.steps for label, t in parts.items()}
    if torch is not None:
        # gloo's background threads would share the cores with the allreduce measured next.
        torch.distributed.destroy_process_group()

    bucketed, raw, nbytes, nbuckets = bench_bucketed_allreduce(comm, ddp.reducer, 20)
    control = ddp.reducer.channel.control
    probe = np.zeros(2, np.int64)
    agreement = timed(comm, lambda: control.Allreduce(MPI.IN_PLACE, [probe, MPI.INT64_T],
                                                      MPI.MAX), 200)
    steps = summarize(timeline.events)
    hidden = comm.allreduce(statistics.mean(s["hidden_fraction"] for s in steps)) / size
    comm_ms = comm.allreduce(statistics.mean(s["comm_ms"] for s in steps)) / size
    wait_ms = comm.allreduce(statistics.mean(s["wait_ms"] for s in steps)) / size
    backward_ms = comm.allreduce(statistics.mean(s["backward_ms"] for s in steps)) / size

    if rank == 0:
        print(f"DDP benchmark: MLP {'-'.join(map(str, SIZES))}, float32, batch {BATCH}/rank, "
              f"{size} ranks, {args.steps} steps x {args.rounds} rounds, "
              f"bucket_cap_mb={args.bucket_cap_mb:g}, "
              f"OMP/OPENBLAS threads {os.environ['OPENBLAS_NUM_THREADS']}")
        print(f"{'configuration':32s} {'step ms':>9s}")
        for name, t in step_time.items():
            print(f"{name:32s} {t * 1e3:9.2f}")
        ddp_t = step_time["mpigrad DDP"]
        alone = step_time["mpigrad, no communication"]
        print(f"mpigrad DDP / no communication: {ddp_t / alone:.3f}  (target <= 1.10)")
        for name in runs:
            if name not in ("mpigrad DDP", "mpigrad, no communication", "PyTorch DDP (gloo)"):
                print(f"{name} / no communication: {step_time[name] / alone:.3f}")
        if torch is not None:
            print(f"mpigrad DDP / PyTorch DDP:      {ddp_t / step_time['PyTorch DDP (gloo)']:.3f}"
                  f"  (target <= 0.6)")
        print(f"allreduce of {nbytes / 2**20:.1f} MB: {nbuckets} buckets {bucketed * 1e3:.2f} ms "
              f"({nbytes / bucketed / 1e9:.2f} GB/s), one raw Allreduce {raw * 1e3:.2f} ms "
              f"({nbytes / raw / 1e9:.2f} GB/s), ratio {raw / bucketed:.3f} (target >= 0.9)")
        print(f"end-of-backward agreement (16-byte Allreduce): {agreement * 1e6:.1f} us per step")
        print(f"timeline, mean over {len(steps)} DDP steps: backward {backward_ms:.2f} ms, "
              f"communication {comm_ms:.2f} ms, hidden behind backward {hidden:.1%}, "
              f"waited at end of backward {wait_ms:.2f} ms")
        print(f"where DDP's {(ddp_t - alone) * 1e3:.2f} ms over the step without communication "
              f"go (ms per step, mean of the ranks, timed over {args.steps} more steps):")
        for label in PARTS.values():
            print(f"  {label:48s} {parts.get(label, 0.0) * 1e3:6.2f}")
        print(f"  {'elsewhere (hooks, optimizer, the rest)':48s} "
              f"{(ddp_t - alone - sum(parts.values())) * 1e3:6.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
