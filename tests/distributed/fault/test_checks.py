"""Mismatched collective calls end in the same error on every rank, naming the ranks and what
differed, before any data moves; afterwards the group still works."""
import re

import numpy as np
import pytest

import mpigrad.distributed as dist
from mpigrad.distributed import ReduceOp

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(autouse=True)
def group_still_works_afterwards(rank, size):
    yield
    arr = np.full(2, float(rank))
    dist.all_reduce(arr)
    np.testing.assert_array_equal(arr, np.full(2, sum(range(size))))


def _ranks(ranks):
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _mismatch(*lines):
    """pytest.raises for a CollectiveMismatchError whose message holds each of `lines`."""
    return pytest.raises(dist.CollectiveMismatchError,
                         match="(?s)" + ".*".join(re.escape(line) for line in lines))


def test_dtype_differs(rank, size):
    last = size - 1
    dtype = np.float64 if rank == last else np.float32
    with _mismatch("collective #", "(all_reduce on this rank)",
                   f"dtype of tensor: float32 on {_ranks(list(range(last)))}; "
                   f"float64 on rank {last}"):
        dist.all_reduce(np.zeros(4, dtype))


def test_shape_differs(rank, size):
    with _mismatch("shape of tensor: (1, 2) on rank 0; (2, 2) on rank 1"):
        dist.broadcast(np.zeros((rank + 1, 2)), src=0)


def test_deep_shapes_compared_in_full(rank):
    shape = (1,) * 9 + (2 + (rank == 1),)
    with _mismatch("shape of tensor: (1, 1, 1, 1, 1, 1, 1, 1, ...) [10 dims, checksum 0x"):
        dist.all_reduce(np.zeros(shape))


def test_different_collectives(rank, size):
    arr = np.zeros(3)
    others = _ranks(list(range(1, size)))
    with _mismatch(f"collective: broadcast on rank 0; all_reduce on {others}"):
        if rank == 0:
            dist.broadcast(arr, src=0)
        else:
            dist.all_reduce(arr)


@pytest.mark.parametrize("root", ["src", "dst"])
def test_root_differs(root, rank, size):
    arr = np.zeros(3)
    with _mismatch(f"{root}: 0 on rank 0; 1 on {_ranks(list(range(1, size)))}"):
        if root == "src":
            dist.broadcast(arr, src=min(rank, 1))
        else:
            dist.reduce(arr, dst=min(rank, 1))


def test_op_differs(rank, size):
    with _mismatch(f"op: ReduceOp.MAX on rank 0; ReduceOp.SUM on {_ranks(list(range(1, size)))}"):
        dist.all_reduce(np.zeros(3), op=ReduceOp.MAX if rank == 0 else ReduceOp.SUM)


def test_algorithm_differs(rank, size):
    with _mismatch(f"algorithm: ring on rank 0; mpi on {_ranks(list(range(1, size)))}"):
        dist.all_reduce(np.zeros(3), algorithm="ring" if rank == 0 else "mpi")


def test_a_rank_that_called_one_more_collective(rank):
    world = dist.group.WORLD
    # Simulate a rank that ran one more collective earlier in the program than the others.
    if rank == 1:
        world._collective_count += 1
    try:
        with _mismatch("collectives called on this group before this one: "):
            dist.barrier()
    finally:
        if rank == 1:
            world._collective_count -= 1


def test_one_rank_rejects_its_arguments(rank, size):
    outs = [np.zeros(2) for _ in range(size + (rank == 1))]
    expected = (pytest.raises(ValueError, match=f"must hold {size} tensors") if rank == 1 else
                _mismatch("the arguments were rejected on rank 1"))
    with expected:
        dist.all_gather(outs, np.zeros(2))


def test_all_to_all_sizes_disagree(rank, size):
    # Every rank expects 2 elements from each peer, but rank 0 sends 3 to rank 1.
    ins = [np.zeros(3 if (rank, j) == (0, 1) else 2) for j in range(size)]
    outs = [np.zeros(2) for _ in range(size)]
    with _mismatch("message sizes in all_to_all",
                   "rank 0 sends 3 elements (input_tensor_list[1]) to rank 1, which expects 2 "
                   "(output_tensor_list[0])"):
        dist.all_to_all(outs, ins)


def test_all_to_all_single_sizes_disagree(rank, size):
    send = [1] * size
    recv = [2 if (rank, j) == (size - 1, 0) else 1 for j in range(size)]
    with _mismatch(f"rank 0 sends 3 elements (input split {size - 1}) to rank {size - 1}, "
                   f"which expects 6 (output split 0)"):
        dist.all_to_all_single(np.zeros((sum(recv), 3)), np.zeros((sum(send), 3)), recv, send)


def test_mismatch_in_a_subgroup_names_global_ranks(rank, size):
    members = [size - 2, size - 1]
    group = dist.new_group(members)
    if rank in members:
        dtype = np.float32 if rank == members[1] else np.float64
        with _mismatch(f"on the group of global ranks {members}",
                       f"float64 on rank {members[0]}; float32 on rank {members[1]}"):
            dist.all_reduce(np.zeros(2, dtype), group=group)
    dist.destroy_process_group(group)


def test_new_group_with_different_ranks(rank, size):
    with _mismatch("ranks: a list with checksum"):
        dist.new_group([0] if rank == 0 else [0, 1])


def test_object_list_lengths_differ(rank, size):
    with _mismatch(f"len(object_list): 1 on rank 0; 2 on {_ranks(list(range(1, size)))}"):
        dist.broadcast_object_list([None] * (1 + min(rank, 1)), src=0)


def test_async_call_checked_at_launch(rank):
    with _mismatch("shape of tensor"):
        dist.all_reduce(np.zeros(2 + rank), async_op=True)


def test_checks_can_be_turned_off(monkeypatch, rank, size):
    monkeypatch.setenv("MPIGRAD_CHECK_COLLECTIVES", "0")
    dist.destroy_process_group()
    dist.init_process_group()
    try:
        assert dist.group.WORLD.check_collectives is False
        arr = np.ones(3)
        dist.all_reduce(arr)
        np.testing.assert_array_equal(arr, np.full(3, size))
    finally:
        monkeypatch.undo()
        dist.destroy_process_group()
        dist.init_process_group()
    assert dist.group.WORLD.check_collectives is True


def test_check_setting_must_agree_across_ranks(monkeypatch, rank):
    dist.destroy_process_group()
    if rank == 0:
        monkeypatch.setenv("MPIGRAD_CHECK_COLLECTIVES", "0")
    with pytest.raises(RuntimeError, match=r"MPIGRAD_CHECK_COLLECTIVES differs across ranks: "
                                           r"on for ranks \[1"):
        dist.init_process_group()
    monkeypatch.undo()
    assert not dist.is_initialized()
    dist.init_process_group()


def test_check_setting_must_be_understood(monkeypatch, rank):
    dist.destroy_process_group()
    if rank == 1:
        monkeypatch.setenv("MPIGRAD_CHECK_COLLECTIVES", "maybe")
    with pytest.raises(ValueError, match="MPIGRAD_CHECK_COLLECTIVES must be 1 or 0, got 'maybe' "
                                         "on rank 1"):
        dist.init_process_group()
    monkeypatch.undo()
    dist.init_process_group()
