"""The ring allreduce against MPI's Allreduce, including sizes not divisible by the world
size and buffers with fewer elements than ranks."""
import numpy as np
import pytest
from mpi4py import MPI

import mpigrad.distributed as dist
from mpigrad.distributed import ReduceOp
from mpigrad.distributed import reduce_ops
from mpigrad.distributed.ring import ring_all_reduce

from ._helpers import assert_matches, rank_input

SIZES = [0, 1, 2, 3, 5, 7, 1000, 1001, 4099]


def _mpi_allreduce(arr, op):
    expected = arr.copy()
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, expected, op)
    return expected


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_ring_matches_mpi_allreduce(n, dtype, rank):
    arr = rank_input(rank, (n,), dtype)
    expected = _mpi_allreduce(arr, MPI.SUM)
    dist.all_reduce(arr, algorithm="ring")
    assert_matches(arr, expected)


@pytest.mark.parametrize("op,dtype", [(ReduceOp.MAX, np.float32), (ReduceOp.PRODUCT, np.int32),
                                      (ReduceOp.BXOR, np.int64), (ReduceOp.BOR, np.bool_),
                                      (ReduceOp.SUM, np.bool_), (ReduceOp.AVG, np.float64)])
def test_ring_ops(op, dtype, rank, size):
    arr = rank_input(rank, (2, 7), dtype)
    expected = _mpi_allreduce(arr, reduce_ops.mpi_op(op, dtype))
    if op is ReduceOp.AVG:
        expected /= size
    dist.all_reduce(arr, op=op, algorithm="ring")
    assert_matches(arr, expected)


def test_every_rank_gets_the_same_bits(rank, size):
    arr = rank_input(rank, (999,), np.float32)
    dist.all_reduce(arr, algorithm="ring")
    everyone = np.zeros((size, 999), np.float32)
    dist.all_gather_into_tensor(everyone, arr)
    assert (everyone == everyone[0]).all()


def test_ring_on_a_group(rank, size):
    members = list(range(1, size)) or [0]
    group = dist.new_group(members)
    arr = rank_input(rank, (10,))
    if rank in members:
        dist.all_reduce(arr, group=group, algorithm="ring")
        assert_matches(arr, np.stack([rank_input(r, (10,)) for r in members]).sum(0))
    dist.destroy_process_group(group)


def test_ring_function_on_a_bare_communicator(rank):
    comm = MPI.COMM_WORLD.Dup()
    try:
        arr = rank_input(rank, (3, 4), np.float64)
        expected = _mpi_allreduce(arr, MPI.MIN)
        ring_all_reduce(arr, MPI.MIN, comm)
        assert_matches(arr, expected)
    finally:
        comm.Free()
