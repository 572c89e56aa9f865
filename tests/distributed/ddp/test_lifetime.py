"""DDP's communicators live as long as the wrapper (or its group), are freed where every rank
agrees, never at the collector's moment, and running out of MPI communicators is an error that
says what holds them."""
import gc

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.distributed.optim import ZeroRedundancyOptimizer
from mpigrad.distributed.process_group import free_released
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

from ._models import MLP, mse, regression_data

# MPICH has 2048 communicators per process; each wrapper duplicates two.
WRAPPERS = 1100


def test_wrappers_created_in_a_loop_free_their_communicators(process_group):
    for _ in range(WRAPPERS):
        model = DDP(nn.Linear(2, 2))
    model(mg.ones(3, 2) * (dist.get_rank() + 1)).sum().backward()  # the last one still works
    world = dist.get_world_size()
    assert model.module.weight.grad._array.tolist() == [[1.5 * (world + 1)] * 2] * 2


def test_destroying_the_group_frees_its_wrappers_communicators(process_group):
    group = dist.new_group()
    model = DDP(nn.Linear(2, 2), process_group=group)
    dist.destroy_process_group(group)
    with pytest.raises(RuntimeError, match="its process group was destroyed"):
        model._channel.comm
    del model
    gc.collect()  # the finalizer of a closed channel frees nothing twice


def test_groups_never_destroyed_run_out_with_an_error_naming_the_limit(process_group):
    groups = []
    try:
        with pytest.raises(RuntimeError) as caught:
            while len(groups) < 5000:
                groups.append(dist.new_group())
    finally:
        for group in groups:
            dist.destroy_process_group(group)
    message = str(caught.value)
    assert "MPI has run out of communicators (this MPI allows " in message
    assert "destroy_process_group(group)" in message
    assert len(groups) > 500


# When each rank runs the cycle collector in the test below: rank r at COLLECTS[r % 3].
COLLECTS = ("before the next wrapper", "after its first step", "only at the end")


def _train(model, optimizer, rank, steps):
    x, y = regression_data(4, seed=rank)
    for _ in range(steps):
        optimizer.zero_grad()
        mse(model(mg.tensor(x)), mg.tensor(y)).backward()
        optimizer.step()


@pytest.mark.mpi(min_size=2)
def test_wrappers_in_reference_cycles_collected_at_different_moments_on_each_rank(rank, size):
    """Wrappers and ZeRO optimizers kept alive by reference cycles are dropped and collected at
    a different point on each rank (one rank before the next wrapper's start-up collectives,
    another after them, the last at the end). The collector frees no communicator (a rank
    freeing one while the others wait in a collective deadlocked 3 ranks under MPICH); the
    job runs on, and every dropped communicator is freed at the first agreement after all
    ranks have collected."""
    world = dist.group.WORLD
    when = COLLECTS[rank % len(COLLECTS)]
    dropped = []  # the mpi4py communicators of the dropped owners (Free() nulls them)
    gc.collect()
    gc.disable()  # the collector runs only where this test says, differently on each rank
    try:
        for round_ in range(3):
            model = DDP(MLP(seed=round_))
            optimizer = ZeroRedundancyOptimizer(model.parameters(), SGD, lr=0.1)
            _train(model, optimizer, rank, steps=6)
            dropped += [*model._channel._comms, optimizer._comm]
            cycle = [model, optimizer]
            cycle.append(cycle)
            del model, optimizer, cycle
            if when == "before the next wrapper":
                gc.collect()
                assert MPI.COMM_NULL not in dropped[-3:], "the cycle collector freed them"
            live = DDP(MLP(seed=10 + round_))
            live_optimizer = ZeroRedundancyOptimizer(live.parameters(), SGD, lr=0.1)
            _train(live, live_optimizer, rank, steps=1)
            if when == "after its first step":
                gc.collect()
                assert MPI.COMM_NULL not in dropped[-3:], "the cycle collector freed them"
            _train(live, live_optimizer, rank, steps=1)
            gathered = np.empty((size,) + live.module.w0._array.shape)
            world.comm.Allgather(np.ascontiguousarray(live.module.w0._array), gathered)
            assert all(np.array_equal(gathered[0], g) for g in gathered)
        gc.collect()
        free_released(world)
        assert all(comm == MPI.COMM_NULL for comm in dropped), "dropped, never freed"
        assert world._released == {}
    finally:
        gc.enable()


@pytest.mark.mpi(min_size=2)
def test_a_subgroups_dropped_wrapper_is_freed_at_the_next_agreement_of_the_world(rank):
    """A wrapper on the group of ranks 0 and 1, dropped on both: the next new_group (an
    agreement over every rank, members of that group or not) frees its communicators."""
    pair = dist.new_group([0, 1])
    held = []
    if rank in (0, 1):
        model = DDP(nn.Linear(2, 2), process_group=pair)
        held = list(model._channel._comms)
        del model
        assert MPI.COMM_NULL not in held  # released only: the agreement has not run
    other = dist.new_group()
    assert all(comm == MPI.COMM_NULL for comm in held)
    dist.destroy_process_group(other)
    dist.destroy_process_group(pair)
