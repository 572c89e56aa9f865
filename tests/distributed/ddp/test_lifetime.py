"""DDP's communicators live as long as the wrapper (or its group), and running out of MPI
communicators is an error that says what holds them."""
import gc

import pytest

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.nn.parallel import DistributedDataParallel as DDP

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
