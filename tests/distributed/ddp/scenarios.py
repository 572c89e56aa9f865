"""Situations that hang without DDP's safeguards, as standalone MPI jobs.

    cd tests/distributed/ddp
    mpiexec -n 2 python scenarios.py unused_one_rank[,unused_all_ranks,mismatch,join_uneven]
    mpiexec -n 3 python scenarios.py stop_mid_backward|kill_mid_backward|stop_while_summing

Each rank prints "OK <scenario>" when the expected outcome happened. The first four run one
after the other in one job when given together (one launch for all of them). test_errors.py
runs them under a timeout, so a regression shows up as a failure rather than a stuck test
run. The
`*_mid_backward` scenarios end differently: the last rank stops (SIGSTOP) or dies (SIGKILL)
in the middle of DDP's backward, and the others must abort the job through the watchdog
within the group's timeout (SHORT_TIMEOUT here) instead of waiting forever.
"""
import datetime
import signal
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
from mpigrad.distributed.algorithms import Join  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from mpigrad.optim import SGD  # noqa: E402
from _models import MLP, mse, regression_data  # noqa: E402


def expect_error(fn, *needles):
    try:
        fn()
    except RuntimeError as exc:
        missing = [n for n in needles if n not in str(exc)]
        if missing:
            raise AssertionError(f"error lacks {missing}: {exc}") from exc
        return
    raise AssertionError("no error was raised")


def backward(model, rank):
    x, y = regression_data(4, seed=rank)
    mse(model(mg.tensor(x)), mg.tensor(y)).backward()


def unused_one_rank(rank):
    model = DDP(MLP(extra=True))
    model.module.use_extra = rank != 0
    expect_error(lambda: backward(model, rank), "'extra'", "rank(s) [0]")


def unused_all_ranks(rank):
    model = DDP(MLP(extra=True))
    model.module.use_extra = False
    expect_error(lambda: backward(model, rank), "'extra'", "all ranks")


def mismatch(rank):
    expect_error(lambda: DDP(MLP(sizes=(5, 7 + rank, 3))), "'w0'", "rank(s) [1]")


def join_uneven(rank):
    model = DDP(MLP(seed=rank))
    opt = SGD(model.parameters(), lr=0.1)
    with Join([model]):
        for s in range(1 + 2 * rank):
            opt.zero_grad()
            x, y = regression_data(4, seed=10 * s + rank)
            mse(model(mg.tensor(x)), mg.tensor(y)).backward()
            opt.step()
    flat = np.concatenate([p._array.ravel() for p in model.parameters()])
    everyone = dist.group.WORLD.comm.allgather(flat)
    assert all(np.array_equal(f, flat) for f in everyone), "parameters differ after Join"


SHORT_TIMEOUT = datetime.timedelta(seconds=5)


def _lose_last_rank_mid_backward(rank, sig):
    """Every rank starts a backward; the last one receives `sig` once some of its buckets are
    launched, at the first layer's weight (whose gradient comes last)."""
    model = DDP(MLP(), bucket_cap_mb=0)
    if rank == dist.get_world_size() - 1:
        model.module.w0.register_post_accumulate_grad_hook(
            lambda param: os.kill(os.getpid(), sig))
    print(f"READY {rank}", flush=True)
    backward(model, rank)
    raise AssertionError(f"rank {rank}: backward finished without rank "
                         f"{dist.get_world_size() - 1}")


def stop_mid_backward(rank):
    _lose_last_rank_mid_backward(rank, signal.SIGSTOP)


def kill_mid_backward(rank):
    _lose_last_rank_mid_backward(rank, signal.SIGKILL)


def stop_while_summing(rank):
    """The last rank stops (SIGSTOP) after the end-of-backward agreement, when it is about to
    sum its slice of a shared bucket: the others wait on its flags in shared memory, not in
    MPI, and must still end the job through the watchdog. Its reductions make no progress
    from the gradient hooks (where its slices could all be summed before the agreement), so
    the first one it waits for, after the agreement, is where it stops."""
    from mpigrad.distributed.algorithms.ddp_comm_hooks.shared_memory import _SharedReduction
    model = DDP(MLP(), bucket_cap_mb=0)
    assert model.reducer.shared is not None, "no shared buckets"
    if rank == dist.get_world_size() - 1:
        progress = _SharedReduction._progress

        def stop_when_waited_for(self, block):
            if block:
                os.kill(os.getpid(), signal.SIGSTOP)
                progress(self, block)

        _SharedReduction._progress = stop_when_waited_for
    print(f"READY {rank}", flush=True)
    backward(model, rank)
    raise AssertionError(f"rank {rank}: backward finished without rank "
                         f"{dist.get_world_size() - 1}")


def main():
    scenarios = sys.argv[1].split(",")
    if any(s.endswith("_mid_backward") or s == "stop_while_summing" for s in scenarios):
        dist.init_process_group(timeout=SHORT_TIMEOUT)
    else:
        dist.init_process_group()
    rank = dist.get_rank()
    for scenario in scenarios:
        globals()[scenario](rank)
        print(f"OK {scenario}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
