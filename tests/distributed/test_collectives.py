"""Every collective against a numpy reference computed from all ranks' inputs."""
import contextlib

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.autograd.profiler import profile
from mpigrad.distributed import ReduceOp
from mpigrad.futures import Future, wait_all

from ._helpers import all_inputs, assert_matches, rank_input, reference_reduce

FLOAT_OPS = [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG]
INT_OPS = [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND,
           ReduceOp.BOR, ReduceOp.BXOR]
CASES = ([(np.float32, op) for op in FLOAT_OPS] + [(np.float64, op) for op in FLOAT_OPS]
         + [(np.int32, op) for op in INT_OPS] + [(np.bool_, op) for op in INT_OPS]
         + [(np.int64, ReduceOp.SUM), (np.uint8, ReduceOp.BXOR)]
         + [(np.complex128, op) for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.AVG)])


def _case_id(value):
    return value.name if isinstance(value, ReduceOp) else np.dtype(value).name


@pytest.mark.parametrize("dtype,op", CASES, ids=_case_id)
@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_all_reduce(dtype, op, async_op, wrap, rank):
    arr = rank_input(rank, (3, 5), dtype)
    work = dist.all_reduce(wrap(arr), op=op, async_op=async_op)
    if async_op:
        assert work.wait() is True
        assert work.is_completed()
    else:
        assert work is None
    assert_matches(arr, reference_reduce(np.stack(all_inputs((3, 5), dtype)), op))


def test_work_is_a_future(rank):
    """An async collective's Work is the project's Future: `then` chains run once the data
    has arrived, `get_future()` is the Work, and its value is True (torch's `wait()`)."""
    arr = rank_input(rank, (6,))
    work = dist.all_reduce(arr, async_op=True)
    assert isinstance(work, Future) and work.get_future() is work
    total = work.then(lambda fut: arr.sum())
    other = rank_input(rank, (2,), seed=1)
    second = dist.all_reduce(other, op=ReduceOp.MAX, async_op=True)
    expected = np.stack(all_inputs((6,))).sum(0)
    assert wait_all([total, second]) == [pytest.approx(expected.sum()), True]
    assert work.done() and work.value() is True
    assert_matches(arr, expected)
    assert_matches(other, np.stack(all_inputs((2,), seed=1)).max(0))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 0, 3)], ids=str)
def test_all_reduce_scalar_and_empty(shape, rank):
    arr = rank_input(rank, shape)
    dist.all_reduce(arr)
    assert arr.shape == shape
    assert_matches(arr, np.stack(all_inputs(shape)).sum(0))


def test_all_reduce_bumps_tensor_version_and_keeps_storage(rank):
    t = mg.tensor(rank_input(rank, (4,)))
    storage, version = t._array, t._version
    dist.all_reduce(t)
    assert t._array is storage
    assert t._version == version + 1
    assert_matches(t._array, np.stack(all_inputs((4,))).sum(0))


def test_async_outputs_valid_after_polling(rank, size):
    arr = rank_input(rank, (1000,), np.float32)
    work = dist.all_reduce(arr, op=ReduceOp.AVG, async_op=True)
    while not work.is_completed():
        pass
    assert_matches(arr, np.stack(all_inputs((1000,), np.float32)).mean(0).astype(np.float32))
    assert len(work.requests) == 1


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_reduce(async_op, wrap, rank, size):
    dst = size - 1
    arr = rank_input(rank, (2, 3), np.int64)
    original = arr.copy()
    work = dist.reduce(wrap(arr), dst=dst, op=ReduceOp.MAX, async_op=async_op)
    if async_op:
        work.wait()
    if rank == dst:
        assert_matches(arr, np.stack(all_inputs((2, 3), np.int64)).max(0))
    else:
        assert_matches(arr, original)


def test_reduce_avg_divides_on_dst_only(rank, size):
    arr = rank_input(rank, (4,))
    original = arr.copy()
    dist.reduce(arr, dst=0, op=ReduceOp.AVG)
    expected = np.stack(all_inputs((4,))).mean(0) if rank == 0 else original
    assert_matches(arr, expected)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_broadcast(async_op, wrap, rank, size):
    src = size - 1
    arr = rank_input(rank, (3, 2), np.float32)
    work = dist.broadcast(wrap(arr), src=src, async_op=async_op)
    if async_op:
        work.wait()
    assert_matches(arr, rank_input(src, (3, 2), np.float32))


def test_broadcast_float16_moves_bits_exactly(rank):
    arr = rank_input(rank, (5,)).astype(np.float16)
    dist.broadcast(arr, src=0)
    assert_matches(arr, rank_input(0, (5,)).astype(np.float16))


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_all_gather(async_op, wrap, rank, size):
    outs = [np.zeros((2, 3), np.int32) for _ in range(size)]
    work = dist.all_gather([wrap(o) for o in outs], wrap(rank_input(rank, (2, 3), np.int32)),
                           async_op=async_op)
    if async_op:
        work.wait()
    for out, expected in zip(outs, all_inputs((2, 3), np.int32)):
        assert_matches(out, expected)


def test_all_gather_input_may_be_its_own_output_slot(rank, size):
    outs = [np.zeros(3) for _ in range(size)]
    outs[rank][:] = rank_input(rank, (3,))
    dist.all_gather(outs, outs[rank])
    for out, expected in zip(outs, all_inputs((3,))):
        assert_matches(out, expected)


@pytest.mark.parametrize("layout", ["concatenated", "stacked"])
@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_all_gather_into_tensor(layout, async_op, wrap, rank, size):
    shape = (size * 2, 3) if layout == "concatenated" else (size, 2, 3)
    out = np.zeros(shape)
    work = dist.all_gather_into_tensor(wrap(out), wrap(rank_input(rank, (2, 3))),
                                       async_op=async_op)
    if async_op:
        work.wait()
    assert_matches(out, np.stack(all_inputs((2, 3))).reshape(shape))


def test_all_gather_into_tensor_in_place(rank, size):
    out = np.zeros((size, 4))
    out[rank] = rank_input(rank, (4,))
    dist.all_gather_into_tensor(out, out[rank])
    assert_matches(out, np.stack(all_inputs((4,))))


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_gather(async_op, wrap, rank, size):
    dst = size - 1
    outs = [np.zeros(4, np.float32) for _ in range(size)] if rank == dst else None
    work = dist.gather(wrap(rank_input(rank, (4,), np.float32)),
                       [wrap(o) for o in outs] if outs else None, dst=dst, async_op=async_op)
    if async_op:
        work.wait()
    if rank == dst:
        for out, expected in zip(outs, all_inputs((4,), np.float32)):
            assert_matches(out, expected)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_scatter(async_op, wrap, rank, size):
    src = size - 1
    pieces = [rank_input(i, (3,), seed=src) for i in range(size)]
    out = np.zeros(3)
    work = dist.scatter(wrap(out), [wrap(p) for p in pieces] if rank == src else None, src=src,
                        async_op=async_op)
    if async_op:
        work.wait()
    assert_matches(out, pieces[rank])


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN])
@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_reduce_scatter(op, async_op, wrap, rank, size):
    inputs = [rank_input(rank, (2,), seed=100 + i) for i in range(size)]
    out = np.zeros(2)
    work = dist.reduce_scatter(wrap(out), [wrap(a) for a in inputs], op=op, async_op=async_op)
    if async_op:
        work.wait()
    everyone = np.stack([rank_input(r, (2,), seed=100 + rank) for r in range(size)])
    assert_matches(out, reference_reduce(everyone, op))


@pytest.mark.parametrize("layout", ["concatenated", "stacked"])
def test_reduce_scatter_tensor(layout, wrap, rank, size):
    shape = (size * 2, 3) if layout == "concatenated" else (size, 2, 3)
    out = np.zeros((2, 3), np.float32)
    dist.reduce_scatter_tensor(wrap(out), wrap(rank_input(rank, shape, np.float32)))
    total = np.stack(all_inputs(shape, np.float32)).sum(0).reshape(size, 2, 3)
    assert_matches(out, total[rank])


def test_reduce_scatter_tensor_output_inside_input(rank, size):
    buf = rank_input(rank, (size, 3))
    dist.reduce_scatter_tensor(buf[0], buf)
    assert_matches(buf[0], np.stack(all_inputs((size, 3))).sum(0)[rank])


def _pair_count(src, dst):
    """Elements rank src sends rank dst in the all-to-all tests: uneven, sometimes zero."""
    return (src + 2 * dst) % 3


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_all_to_all(async_op, wrap, rank, size):
    ins = [rank_input(rank, (_pair_count(rank, j),), np.int64, seed=j) for j in range(size)]
    outs = [np.zeros(_pair_count(j, rank), np.int64) for j in range(size)]
    work = dist.all_to_all([wrap(o) for o in outs], [wrap(i) for i in ins], async_op=async_op)
    if async_op:
        work.wait()
    for j, out in enumerate(outs):
        assert_matches(out, rank_input(j, (_pair_count(j, rank),), np.int64, seed=rank))


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_all_to_all_single_uneven(async_op, wrap, rank, size):
    send_rows = [_pair_count(rank, j) for j in range(size)]
    recv_rows = [_pair_count(j, rank) for j in range(size)]
    inp = rank_input(rank, (sum(send_rows), 2))
    out = np.zeros((sum(recv_rows), 2))
    work = dist.all_to_all_single(wrap(out), wrap(inp), recv_rows, send_rows, async_op=async_op)
    if async_op:
        work.wait()
    expected = []
    for j in range(size):
        theirs = rank_input(j, (sum(_pair_count(j, k) for k in range(size)), 2))
        start = sum(_pair_count(j, k) for k in range(rank))
        expected.append(theirs[start:start + _pair_count(j, rank)])
    assert_matches(out, np.concatenate(expected))


def test_all_to_all_single_even(rank, size):
    inp = rank_input(rank, (size * 2, 3))
    out = np.zeros_like(inp)
    dist.all_to_all_single(out, inp)
    expected = np.concatenate([a.reshape(size, 2, 3)[rank] for a in all_inputs((size * 2, 3))])
    assert_matches(out, expected)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_barrier(async_op):
    work = dist.barrier(async_op=async_op)
    if async_op:
        assert work.wait()
        assert work.is_completed()
    else:
        assert work is None


def test_object_collectives(rank, size):
    gathered = [None] * size
    dist.all_gather_object(gathered, {"rank": rank, "name": f"r{rank}"})
    assert gathered == [{"rank": r, "name": f"r{r}"} for r in range(size)]
    objects = [("from", rank), [rank] * 3]
    dist.broadcast_object_list(objects, src=size - 1)
    assert objects == [("from", size - 1), [size - 1] * 3]


def test_collectives_on_a_group(rank, size):
    members = list(range(0, size, 2))
    group = dist.new_group(members)
    arr = rank_input(rank, (3,))
    original = arr.copy()
    # As in torch, a rank outside the group warns and does nothing.
    warns = pytest.warns(UserWarning, match="not a member")
    with contextlib.nullcontext() if rank in members else warns:
        dist.all_reduce(arr, group=group)
        dist.broadcast(arr, src=members[-1], group=group)
    if rank in members:
        expected = np.stack([rank_input(r, (3,)) for r in members]).sum(0)
        assert_matches(arr, expected)
    else:
        assert_matches(arr, original)
    dist.destroy_process_group(group)


def test_blocking_collectives_are_profiler_rows():
    t = mg.ones(4)
    with profile() as prof:
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
    calls = {row.key: row.count for row in prof.key_averages()}
    assert calls["mpi:Allreduce"] == 1 and calls["mpi:Bcast"] == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_premul_sum_is_the_sum_of_each_ranks_tensor_times_its_factor(dtype, rank, size):
    """torch's PREMUL_SUM (dist._make_nccl_premul_sum): each rank may pass its own factor."""
    factors = [0.5 + r for r in range(size)]
    op = dist._make_nccl_premul_sum(factors[rank])
    inputs = all_inputs((2, 3), dtype)
    expected = sum(f * x for f, x in zip(factors, inputs)).astype(dtype)
    tolerance = {"rtol": 1e-6 if dtype == np.float32 else 1e-12}

    arr = rank_input(rank, (2, 3), dtype)
    dist.all_reduce(arr, op=op)
    np.testing.assert_allclose(arr, expected, **tolerance)

    arr, original = rank_input(rank, (2, 3), dtype), rank_input(rank, (2, 3), dtype)
    dist.reduce(arr, dst=0, op=dist._make_nccl_premul_sum(mg.tensor([factors[rank]])))
    np.testing.assert_allclose(arr, expected if rank == 0 else original, **tolerance)

    blocks = [np.full(4, rank + i, dtype) for i in range(size)]
    out = np.empty(4, dtype)
    dist.reduce_scatter(out, blocks, op=op)
    np.testing.assert_allclose(out, sum(f * (r + rank) for r, f in enumerate(factors)),
                               **tolerance)
    stacked = np.stack(blocks)
    dist.reduce_scatter_tensor(out, stacked, op=op)
    np.testing.assert_allclose(out, sum(f * (r + rank) for r, f in enumerate(factors)),
                               **tolerance)
    np.testing.assert_array_equal(stacked, np.stack(blocks))  # the input is left alone


def test_premul_sum_needs_its_factor_and_a_float_tensor(rank):
    with pytest.raises(ValueError, match="needs its factor"):
        dist.all_reduce(np.zeros(2), op=ReduceOp.PREMUL_SUM)
    with pytest.raises(TypeError, match="needs a float32, float64 or complex tensor"):
        dist.all_reduce(np.zeros(2, np.int64), op=dist._make_nccl_premul_sum(2.0))
