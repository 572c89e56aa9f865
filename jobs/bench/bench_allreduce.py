"""Ring allreduce (point-to-point, mpigrad.distributed.ring) against MPI's own Allreduce.

    timeout 600 mpiexec -n 2 python jobs/bench/bench_allreduce.py [--max-seconds 1.0]

For float32 buffers from 4 KB to 64 MB it prints the time of one allreduce (the slowest
rank's mean over a loop of calls, best of 5 loops), the bus bandwidth (2(N-1)/N * bytes /
time: what each link carries, comparable across N) and the ring/MPI time ratio. Then the
per-call overhead of the user-facing `all_reduce` over a bare `comm.Allreduce` on a 4-byte
tensor, with the cross-rank signature checks on and off.
"""
import argparse
import os
import time

import numpy as np
from mpi4py import MPI

import mpigrad.distributed as dist
from mpigrad.distributed.ring import ring_all_reduce

SIZES = [4 << 10 << 2 * i for i in range(8)]  # 4 KB, 16 KB, ..., 64 MB


def seconds_per_call(comm, run, budget, trials=5):
    """Seconds per call of `run()` on the slowest rank: the best of `trials` timed loops
    sharing about `budget` seconds (the best, because other load on the machine only ever
    adds time)."""
    run()  # warm-up: first touch of the buffers, connection set-up
    comm.Barrier()
    start = time.perf_counter()
    run()
    once = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    repeats = max(1, min(1000, int(budget / trials / max(once, 1e-9))))
    best = float("inf")
    for _ in range(trials):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        best = min(best, comm.allreduce((time.perf_counter() - start) / repeats, op=MPI.MAX))
    return best


def bench_algorithms(comm, budget):
    size = comm.Get_size()
    rows = []
    for nbytes in SIZES:
        buf = np.ones(nbytes // 4, np.float32)
        mpi_time = seconds_per_call(comm, lambda: comm.Allreduce(MPI.IN_PLACE, buf, MPI.SUM),
                                    budget)
        ring_time = seconds_per_call(comm, lambda: ring_all_reduce(buf, MPI.SUM, comm), budget)
        traffic = 2 * (size - 1) / size * nbytes
        rows.append((nbytes, mpi_time, traffic / mpi_time, ring_time, traffic / ring_time))
    return rows


def bench_call_overhead(budget):
    """Microseconds all_reduce adds to comm.Allreduce on a 4-byte tensor, checks on and off."""
    overhead = {}
    for setting in ("1", "0"):
        os.environ["MPIGRAD_CHECK_COLLECTIVES"] = setting
        dist.init_process_group()
        comm = dist.group.WORLD.comm
        small = np.ones(1, np.float32)
        bare = seconds_per_call(comm, lambda: comm.Allreduce(MPI.IN_PLACE, small, MPI.SUM),
                                budget)
        full = seconds_per_call(comm, lambda: dist.all_reduce(small), budget)
        overhead[setting] = (bare, full)
        dist.destroy_process_group()
    return overhead


def human(nbytes):
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=1.0,
                        help="time budget per measurement (default 1.0)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    rows = bench_algorithms(comm, args.max_seconds)
    overhead = bench_call_overhead(args.max_seconds / 4)
    if comm.Get_rank() != 0:
        return
    library = MPI.Get_library_version().splitlines()[0]
    print(f"allreduce of float32 on {comm.Get_size()} ranks ({library})")
    print(f"{'size':>8} {'MPI time':>11} {'MPI busbw':>11} {'ring time':>11} {'ring busbw':>11} "
          f"{'ring/MPI':>9}")
    for nbytes, mpi_time, mpi_bw, ring_time, ring_bw in rows:
        print(f"{human(nbytes):>8} {mpi_time * 1e6:>9.1f}us {mpi_bw / 1e9:>7.2f}GB/s "
              f"{ring_time * 1e6:>9.1f}us {ring_bw / 1e9:>7.2f}GB/s {ring_time / mpi_time:>9.2f}")
    for setting, label in (("1", "on"), ("0", "off")):
        bare, full = overhead[setting]
        print(f"all_reduce of 4 bytes with checks {label:>3}: {full * 1e6:6.1f}us per call, "
              f"{(full - bare) * 1e6:6.1f}us over comm.Allreduce ({bare * 1e6:.1f}us)")


if __name__ == "__main__":
    main()
