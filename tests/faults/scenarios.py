"""Faults injected into small data-parallel jobs; test_faults.py runs each under mpiexec.

    mpiexec -n 2 python tests/faults/scenarios.py <scenario>[,<scenario>...] [marker]
    python tests/faults/scenarios.py warm   # fills numba's cache for the scenarios' steps

Rank 1 is the faulty rank (the others behave). Just before the fault, rank 1 prints
"FAULT <unix time>", so the test can bound how long the job took to end after it. The
`marker` argument only tags the processes, so the test can find any left behind. The group's
timeout is 4 s and MPIGRAD_STALL_SECONDS is set by the test, so stalls end quickly.
"""
import datetime
import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.distributed.fault import watchdog
from mpigrad.nn.parallel import DistributedDataParallel as DDP

FAULTY = 1
TIMEOUT = datetime.timedelta(seconds=4)


def fault(what):
    print(f"FAULT {time.time():.3f} {what}", flush=True)


def small_model():
    mg.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def model_and_data(rank, steps=6):
    model = DDP(small_model(), bucket_cap_mb=0)
    rng = np.random.default_rng(rank)
    batches = [(mg.tensor(rng.standard_normal((5, 8)).astype(np.float32)),
                mg.tensor(rng.standard_normal((5, 4)).astype(np.float32)))
               for _ in range(steps)]
    return model, batches


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()


def parameters_agree(model):
    """Whether every rank holds the same parameters (compared through a checksum)."""
    mine = np.array([sum(float(np.abs(p._array).sum()) for p in model.parameters())])
    everyone = np.zeros(dist.get_world_size())
    dist.all_gather_into_tensor(everyone, mine)
    return bool((everyone == everyone[0]).all())


# ---------------------------------------------------------------------------- exceptions
def exception_in_backward_caught(rank):
    """Rank 1's backward raises once some buckets are in flight, and the script does what
    many do: catch any exception around backward, step anyway, train on. Every rank must get
    DDP's error from that same backward, and the parameters must stay equal to the end."""
    model, batches = model_and_data(rank)
    optimizer = mg.optim.SGD(model.parameters(), lr=0.1)
    first_layer = model.module[0].weight  # its gradient comes last
    for step, (x, y) in enumerate(batches):
        handle = None
        if rank == FAULTY and step == 2:
            handle = first_layer.register_hook(_raise_once)
            fault("exception inside backward, caught")
        optimizer.zero_grad()
        try:
            ((model(x) - y) ** 2).mean().backward()
        except Exception as err:  # noqa: BLE001 - the pattern under test
            print(f"[rank {rank}] step {step}: {type(err).__name__}: {err}", flush=True)
            assert all(p.grad is None for p in model.parameters())
        finally:
            if handle is not None:
                handle.remove()
        optimizer.step()
    print(f"[rank {rank}] parameters agree: {parameters_agree(model)}", flush=True)


def _raise_once(grad):
    raise ValueError("injected fault in backward")


def exception_in_backward(rank):
    """Rank 1's backward raises and nobody catches it."""
    model, batches = model_and_data(rank)
    if rank == FAULTY:
        model.module[0].weight.register_hook(_raise_once)
        fault("exception inside backward")
    train_step(model, mg.optim.SGD(model.parameters(), lr=0.1), *batches[0])


def exception_outside_backward(rank):
    """Rank 1 raises between steps (a bad batch, say) while the others train on."""
    model, batches = model_and_data(rank)
    optimizer = mg.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(batches):
        if rank == FAULTY and step == 2:
            fault("exception outside backward")
            raise ValueError("injected fault between steps")
        train_step(model, optimizer, x, y)


def mismatched_collectives(rank):
    buffer = np.ones(3)
    if rank == FAULTY:
        fault("broadcast where the others all_reduce")
        dist.broadcast(buffer, src=0)
    else:
        dist.all_reduce(buffer)


# ---------------------------------------------------------------------------- dead, gone, slow
def sigkill(rank):
    model, batches = model_and_data(rank)
    optimizer = mg.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(batches):
        if rank == FAULTY and step == 2:
            fault("SIGKILL")
            os.kill(os.getpid(), signal.SIGKILL)
        train_step(model, optimizer, x, y)


def sys_exit(rank):
    """Rank 1 calls sys.exit() while the others enter a collective."""
    buffer = np.ones(3)
    dist.all_reduce(buffer)
    if rank == FAULTY:
        fault("sys.exit(3)")
        sys.exit(3)
    dist.all_reduce(buffer)


def _train_then_run_out(rank, fault_text):
    """Rank 1 has two batches, the others six: it stops training while they go on."""
    model, batches = model_and_data(rank)
    optimizer = mg.optim.SGD(model.parameters(), lr=0.1)
    if rank == FAULTY:
        batches = batches[:2]
    for x, y in batches:
        train_step(model, optimizer, x, y)
    if rank == FAULTY:
        fault(fault_text)


def return_from_main(rank):
    """Rank 1's script simply ends (its data ran out) while the others train on."""
    _train_then_run_out(rank, "end of the script")


def messages_after_one_left(rank):
    """Rank 1 is done and exits; ranks 0 and 2 go on exchanging messages, which do not need
    it: no abort, a clean end. (Run on 3 ranks: on 2 there is no pair without rank 1.)"""
    if rank == FAULTY:
        fault("leaving while the others exchange messages")
        return
    peer = 2 if rank == 0 else 0
    buffer = np.zeros(3)
    for step in range(20):
        time.sleep(0.2)  # the others' wait for each message spans the departure
        if rank == 0:
            dist.send(buffer + step, dst=peer)
        else:
            dist.recv(buffer, src=peer)
            assert (buffer == step).all()


def recv_from_one_that_left(rank):
    """Rank 1 exits while the others wait for a message from it: they abort at once, naming
    it, instead of waiting for the timeout."""
    buffer = np.zeros(3)
    dist.barrier()
    if rank == FAULTY:
        fault("leaving while the others wait for its message")
        return
    dist.recv(buffer, src=FAULTY)


def finalize_by_the_script(rank):
    """The script calls MPI.Finalize() itself while the watchdog thread polls MPI: from the
    start of the Finalize the thread must not touch MPI again, and the job ends cleanly."""
    dist.all_reduce(np.ones(3))
    if rank == FAULTY:
        fault("MPI.Finalize() called by the script")
    MPI.Finalize()
    print(f"[rank {rank}] watchdog out of MPI: {watchdog._dog.control is None}",
          flush=True)
    time.sleep(3 * watchdog._POLL_SECONDS)  # the thread goes on polling after Finalize


def uneven_data_without_join(rank):
    """Rank 1 runs out of data and, as many scripts do, all_reduces its epoch totals, while
    the others are still in DDP's backward: two different calls, which can never match."""
    _train_then_run_out(rank, "out of data")
    dist.all_reduce(np.ones(2))


def stall_in_collective(rank):
    """Rank 1 is busy (sleeps) far longer than the timeout before an all_reduce."""
    buffer = np.ones(3)
    if rank == FAULTY:
        fault("sleeping 60 s before all_reduce")
        time.sleep(60)
    dist.all_reduce(buffer)


def stall_in_ddp_constructor(rank):
    if rank == FAULTY:
        fault("sleeping 60 s before DistributedDataParallel()")
        time.sleep(60)
    model_and_data(rank)


def stall_in_backward(rank):
    model, batches = model_and_data(rank)
    if rank == FAULTY:
        model.module[0].weight.register_hook(lambda grad: time.sleep(60))
        fault("sleeping 60 s inside backward")
    train_step(model, mg.optim.SGD(model.parameters(), lr=0.1), *batches[0])


def warm():
    """One training step of the scenarios' model, without a process group. Run once before
    the jobs start, it puts the compiled loops their steps use in numba's cache: on a cold
    cache the ranks of a dozen jobs queue to compile each loop in turn. Run again by every
    rank before it joins the group, it loads them (numba's import and LLVM's start: seconds
    on a machine that runs a dozen jobs at once) where no timeout counts: a rank loading them
    in its first optimizer step outlasted the group's 4 s timeout while the others waited in
    the next step's collective."""
    local = small_model()
    x, y = (mg.tensor(np.ones(shape, np.float32)) for shape in ((5, 8), (5, 4)))
    train_step(local, mg.optim.SGD(local.parameters(), lr=0.1), x, y)


def main():
    warm()
    if sys.argv[1] == "warm":
        return
    dist.init_process_group(timeout=TIMEOUT)
    rank = dist.get_rank()
    for scenario in sys.argv[1].split(","):  # in turn: those before must leave the ranks in line
        globals()[scenario](rank)
        print(f"[rank {rank}] END {scenario}", flush=True)


if __name__ == "__main__":
    main()
