"""The default group, sub-groups, rank bookkeeping and their errors."""
import contextlib
import datetime

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad.distributed as dist
from mpigrad.distributed.process_group import _get_default_group


def test_default_group_is_comm_world():
    world = dist.group.WORLD
    assert dist.is_initialized() and dist.is_available()
    assert world is _get_default_group() is dist.GroupMember.WORLD
    assert dist.get_rank() == MPI.COMM_WORLD.Get_rank() == world.rank()
    assert dist.get_world_size() == MPI.COMM_WORLD.Get_size() == world.size()
    # Our own context: same processes, but the user's messages on COMM_WORLD never match ours.
    assert world.comm != MPI.COMM_WORLD
    assert MPI.Comm.Compare(world.comm, MPI.COMM_WORLD) == MPI.CONGRUENT
    assert dist.get_backend() == "mpi"


def test_local_rank_and_size():
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        assert dist.get_local_world_size() == node.Get_size()
        local_ranks = node.allgather(dist.get_local_rank())
        assert sorted(local_ranks) == list(range(node.Get_size()))
        assert local_ranks[node.Get_rank()] == dist.get_local_rank()
    finally:
        node.Free()


def test_init_errors_are_torchs():
    with pytest.raises(ValueError, match="initialize the default process group twice"):
        dist.init_process_group()
    with pytest.raises(ValueError, match="initialize the default process group twice"):
        dist.init_process_group("gloo")


def test_destroy_then_init_on_another_communicator(rank):
    dist.destroy_process_group()
    assert not dist.is_initialized() and dist.group.WORLD is None
    with pytest.raises(ValueError, match=r"Default process group has not been initialized.*"
                                         r"get_rank\(\) needs it"):
        dist.get_rank()
    with pytest.raises(ValueError, match="init_process_group"):
        dist.all_reduce(np.zeros(1))
    with pytest.raises(TypeError, match="intracommunicator"):
        dist.init_process_group(MPI.COMM_NULL)
    dist.init_process_group(MPI.COMM_SELF)
    try:
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
        arr = np.full(2, float(rank))
        dist.all_reduce(arr)
        np.testing.assert_array_equal(arr, [rank, rank])
    finally:
        dist.destroy_process_group()
        dist.init_process_group()
    assert dist.get_world_size() == MPI.COMM_WORLD.Get_size()


def test_new_group_of_all_ranks_by_default(size):
    group = dist.new_group()
    assert dist.get_world_size(group) == size
    assert dist.get_process_group_ranks(group) == list(range(size))
    dist.destroy_process_group(group)
    with pytest.raises(ValueError, match="was destroyed"):
        dist.all_reduce(np.zeros(1), group=group)


@pytest.mark.mpi(min_size=2)
def test_new_group_membership_and_rank_translation(rank, size):
    members = [size - 1, 0]  # sorted by new_group, as in torch
    group = dist.new_group(members)
    if rank in members:
        assert isinstance(group, dist.ProcessGroup)
        assert dist.get_process_group_ranks(group) == [0, size - 1]
        assert dist.get_rank(group) == (0 if rank == 0 else 1)
        assert dist.get_world_size(group) == 2
        assert dist.get_global_rank(group, 1) == size - 1
        assert dist.get_group_rank(group, size - 1) == 1
        if size > 2:
            with pytest.raises(ValueError, match=f"global_rank=1 is not a member of the group of "
                                                 rf"global ranks \[0, {size - 1}\]"):
                dist.get_group_rank(group, 1)
        with pytest.raises(ValueError, match=f"global_rank={size} is out of range"):
            dist.get_group_rank(group, size)
        with pytest.raises(ValueError, match=r"group_rank must be in \[0, 2\)"):
            dist.get_global_rank(group, 2)
    else:
        assert group is dist.GroupMember.NON_GROUP_MEMBER
        assert dist.get_rank(group) == dist.get_world_size(group) == -1
    dist.destroy_process_group(group)


@pytest.mark.mpi(min_size=3)
def test_root_outside_the_group(rank, size):
    group = dist.new_group([0, 2])
    if rank in (0, 2):
        with pytest.raises(ValueError, match=r"src=1 is not a member of the group of global "
                                             r"ranks \[0, 2\]"):
            dist.broadcast(np.zeros(1), src=1, group=group)
    dist.destroy_process_group(group)


@pytest.mark.parametrize("ranks,error,message", [
    ([0, 0], ValueError, "must not repeat"),
    ([-1], ValueError, "global ranks in"),
    (["0"], ValueError, "global ranks in"),
    ([], ValueError, "at least one rank"),
    (3, TypeError, "list of global ranks"),
])
def test_new_group_bad_ranks(ranks, error, message):
    with pytest.raises(error, match=message):
        dist.new_group(ranks)


@pytest.mark.parametrize("timeout", [5, datetime.timedelta(0)])
def test_timeout_must_be_a_positive_timedelta(timeout):
    with pytest.raises(TypeError, match="timeout must be a positive datetime.timedelta"):
        dist.new_group(timeout=timeout)


def test_new_group_inherits_or_sets_the_timeout():
    inherited = dist.new_group()
    own = dist.new_group(timeout=datetime.timedelta(seconds=90))
    assert inherited.timeout == dist.group.WORLD.timeout == 1800
    assert own.timeout == 90
    dist.destroy_process_group(own)
    dist.destroy_process_group(inherited)


def test_non_member_calls_do_nothing_and_warn(rank, size):
    group = dist.new_group([0])
    arr = np.full(1, float(rank + 1))
    warns = pytest.warns(UserWarning, match=f"on global rank {rank}, which is not a member")
    with contextlib.nullcontext() if rank == 0 else warns:
        assert dist.all_reduce(arr, group=group) is None
    np.testing.assert_array_equal(arr, [rank + 1])
    dist.destroy_process_group(group)


def test_group_argument_type():
    with pytest.raises(TypeError, match="group must be a ProcessGroup from new_group"):
        dist.all_reduce(np.zeros(1), group=[0, 1])
