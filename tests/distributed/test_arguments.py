"""Wrong arguments raise errors that say what was expected. Every rank passes the same bad
argument here, so these run at any world size (including serially)."""
import re

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.distributed import ReduceOp


def test_non_contiguous_array_and_tensor():
    view = np.zeros((4, 4))[:, 0]
    with pytest.raises(ValueError, match="tensor must be C-contiguous.*strides"):
        dist.all_reduce(view)
    with pytest.raises(ValueError, match="C-contiguous"):
        dist.broadcast(mg.from_numpy(view), src=0)


def test_not_a_tensor():
    with pytest.raises(TypeError, match="mpigrad.Tensor or a numpy.ndarray, got list"):
        dist.all_reduce([1.0, 2.0])


def test_read_only_output():
    arr = np.zeros(3)
    arr.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        dist.broadcast(arr, src=0)


@pytest.mark.parametrize("arr", [np.array(["a"]), np.zeros(2, ">f8"), np.zeros(2, object)],
                         ids=["str", "big-endian", "object"])
def test_unsupported_dtype(arr):
    with pytest.raises(TypeError, match="cannot be sent over MPI; supported"):
        dist.all_reduce(arr)


@pytest.mark.parametrize("dtype,op,message", [
    (np.int64, ReduceOp.AVG, "AVG needs a floating-point"),
    (np.bool_, ReduceOp.AVG, "AVG is not defined for bool"),
    (np.float32, ReduceOp.BAND, "BAND needs an integer or bool"),
    (np.complex64, ReduceOp.MAX, "MAX is not defined for complex"),
    (np.float16, ReduceOp.SUM, "no reductions on float16"),
    (mg.bfloat16, ReduceOp.SUM, "no reductions on bfloat16"),
    (np.float64, "sum", "op must be a ReduceOp"),
])
def test_reduce_op_not_valid_for_dtype(dtype, op, message):
    with pytest.raises(TypeError, match=message):
        dist.all_reduce(np.zeros(2, dtype), op=op)


def test_algorithm_choice():
    with pytest.raises(ValueError, match=re.escape("algorithm must be one of ('mpi', 'ring')")):
        dist.all_reduce(np.zeros(2), algorithm="tree")
    with pytest.raises(ValueError, match="cannot be combined with async_op=True"):
        dist.all_reduce(np.zeros(2), algorithm="ring", async_op=True)


def test_list_of_wrong_length_or_type(size):
    x = np.zeros(3)
    with pytest.raises(ValueError, match=f"tensor_list must hold {size} tensors .* got {size + 1}"):
        dist.all_gather([np.zeros(3) for _ in range(size + 1)], x)
    with pytest.raises(TypeError, match="tensor_list must be a list"):
        dist.all_gather(np.zeros((size, 3)), x)


def test_list_item_with_wrong_layout(size):
    outs = [np.zeros(3) for _ in range(size)]
    outs[-1] = np.zeros(4)
    with pytest.raises(ValueError, match=rf"tensor_list\[{size - 1}\] has shape \(4,\)"):
        dist.all_gather(outs, np.zeros(3))
    with pytest.raises(ValueError, match=r"input_list\[0\] has .* dtype float32"):
        dist.reduce_scatter(np.zeros(2), [np.zeros(2, np.float32)] * size)


def test_into_tensor_shapes(size):
    with pytest.raises(ValueError, match=rf"must have dtype float64 and shape \({size * 2}, 3\) "
                                         rf"\(concatenated\) or \({size}, 2, 3\) \(stacked\)"):
        dist.all_gather_into_tensor(np.zeros((size * 2 + 1, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="shape"):
        dist.reduce_scatter_tensor(np.zeros(2), np.zeros(size * 2 + 1))


@pytest.mark.parametrize("src,error,message", [
    ("size", ValueError, "src=.* is out of range: global ranks are 0.."),
    (-1, ValueError, "out of range"),
    ("0", TypeError, "src must be an int global rank"),
    (True, TypeError, "src must be an int global rank"),
])
def test_rank_out_of_range(src, error, message, size):
    with pytest.raises(error, match=message):
        dist.broadcast(np.zeros(2), src=size if src == "size" else src)


def test_gather_and_scatter_lists_required_on_root(rank):
    # Only the root's arguments are wrong; the other ranks learn it from the signature check
    # instead of waiting for the root.
    def expect(message):
        if rank == 0:
            return pytest.raises(ValueError, match=message)
        return pytest.raises(dist.CollectiveMismatchError, match="rejected on rank 0")

    with expect("gather_list is required on the destination rank 0"):
        dist.gather(np.zeros(2), None, dst=0)
    with expect("scatter_list is required on the source rank 0"):
        dist.scatter(np.zeros(2), None, src=0)


def test_all_to_all_arguments(size):
    with pytest.raises(TypeError, match=r"output_tensor_list\[0\] has dtype int64; all tensors"):
        dist.all_to_all([np.zeros(1, np.int64)] * size, [np.zeros(1)] * size)
    with pytest.raises(ValueError, match="input_split_sizes must be .* summing to input's 3 rows"):
        dist.all_to_all_single(np.zeros(3), np.zeros(3), [3] + [0] * (size - 1),
                               [1] * (size + 1))
    with pytest.raises(ValueError, match="at least one dimension"):
        dist.all_to_all_single(np.zeros(()), np.zeros(()))


@pytest.mark.parametrize("tag", [-1, 2**40, 1.5])
def test_bad_tag(tag, rank):
    with pytest.raises(ValueError, match=r"tag must be an int in \[0, "):
        dist.isend(np.zeros(1), dst=rank, tag=tag)


def test_blocking_send_to_self(rank):
    with pytest.raises(ValueError, match="own rank; a blocking send/recv to itself would deadlock"):
        dist.send(np.zeros(1), dst=rank)


def test_nonblocking_send_to_self(rank):
    received = np.zeros(3)
    recv = dist.irecv(received, src=rank, tag=7)
    dist.isend(np.arange(3.0), dst=rank, tag=7).wait()
    assert recv.source_rank() == rank
    np.testing.assert_array_equal(received, [0.0, 1.0, 2.0])


def test_source_rank_only_for_irecv(rank):
    work = dist.isend(np.zeros(1), dst=rank)
    dist.irecv(np.zeros(1), src=rank).wait()
    with pytest.raises(ValueError, match="only defined for the Work of an irecv"):
        work.source_rank()
