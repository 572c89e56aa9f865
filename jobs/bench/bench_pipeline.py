"""Pipeline parallelism: the measured bubble (the share of a step a rank spends waiting for its
neighbours) against the ideal (p - 1) / (m + p - 1) of p equal stages and m micro-batches
(interleaved 1F1B with v stages per rank: (p - 1) / (v m + p - 1)).

    OMP_NUM_THREADS=1 timeout 900 mpiexec -n 4 python jobs/bench/bench_pipeline.py
    OMP_NUM_THREADS=1 timeout 900 mpiexec -n 2 python jobs/bench/bench_pipeline.py --steps 2

Model: p x v stages of `--layers` Linear(W, W) + ReLU pairs each (float32), the micro-batch
`--mb-size` rows, MSE loss. A rank's waiting time is what it spends blocked for a message:
receiving an activation or a gradient it needs (Inbox.take) and the sends still in flight at
the end of the step (Outbox.finish), measured by wrapping those two calls. The bubble is the
ranks' mean of waiting / step time over `--steps` steps after one warm-up step; the ideal
assumes equal stages and free messages, so the measured one also holds the messages' cost and
any imbalance between ranks (the first and last stages do a little more: input slicing, the
loss).
"""
import argparse
from harness import timed  # first: sets threads

import functools  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
from mpigrad import nn  # noqa: E402
from mpigrad.distributed.pipelining import (Schedule1F1B, ScheduleGPipe,  # noqa: E402
                                            ScheduleInterleaved1F1B, SplitPoint, pipeline)
from mpigrad.distributed.pipelining import messages  # noqa: E402

SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B,
             "Interleaved1F1B": ScheduleInterleaved1F1B}
_waited = [0.0]


def _counting_waits(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            _waited[0] += time.perf_counter() - start
    return wrapper


messages.Inbox.take = _counting_waits(messages.Inbox.take)
messages.Outbox.finish = _counting_waits(messages.Outbox.finish)


def mse(out, target):
    return ((out - target) ** 2).mean()


def build(schedule_name, p, rank, m, args):
    v = 2 if schedule_name == "Interleaved1F1B" else 1
    num_stages = p * v
    mg.manual_seed(0)
    layers = []
    for _ in range(num_stages * args.layers):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*layers)
    rng = np.random.default_rng(0)
    x = mg.tensor(rng.standard_normal((m * args.mb_size, args.width)).astype(np.float32))
    y = mg.tensor(rng.standard_normal((m * args.mb_size, args.width)).astype(np.float32))
    spec = {str(2 * args.layers * k): SplitPoint.BEGINNING for k in range(1, num_stages)}
    pipe = pipeline(model, (x[:args.mb_size],), split_spec=spec)
    stages = [pipe.build_stage(i) for i in range(rank, num_stages, p)]
    schedule = SCHEDULES[schedule_name](stages if v > 1 else stages[0], m, loss_fn=mse)
    step_args = (x,) if rank == 0 else ()
    target = y if rank == (num_stages - 1) % p else None
    return (lambda: schedule.step(*step_args, target=target)), v


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--microbatches", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--schedules", nargs="+", default=list(SCHEDULES),
                        choices=list(SCHEDULES))
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2, help="Linear+ReLU pairs per stage")
    parser.add_argument("--mb-size", type=int, default=32)
    args = parser.parse_args()
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    rows = []
    for name in args.schedules:
        for m in args.microbatches:
            if name == "Interleaved1F1B" and m % p:
                continue
            step, v = build(name, p, rank, m, args)
            step()  # warm-up
            _waited[0] = 0.0
            seconds = timed(comm, step, args.steps)
            bubble = statistics.mean(comm.allgather(_waited[0] / args.steps / seconds))
            ideal = (p - 1) / (v * m + p - 1)
            rows.append((name, m, seconds * 1e3, bubble, ideal))
    if rank == 0:
        print(f"Pipeline bubble: {p} ranks, {args.layers} x Linear({args.width}) + ReLU per "
              f"stage, micro-batches of {args.mb_size}, mean of {args.steps} steps")
        print(f"{'schedule':16s} {'m':>3s} {'step ms':>8s} {'bubble':>7s} {'ideal':>7s} "
              f"{'/ ideal':>8s}")
        for name, m, ms, bubble, ideal in rows:
            ratio = f"{bubble / ideal:8.2f}" if ideal else f"{'-':>8s}"
            print(f"{name:16s} {m:3d} {ms:8.1f} {bubble:7.3f} {ideal:7.3f} {ratio}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
