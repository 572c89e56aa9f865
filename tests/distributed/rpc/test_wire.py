"""Tensors and arrays travel as raw buffers: exact values, dtypes, shapes, identity."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed.rpc as rpc

from . import _remote

pytestmark = pytest.mark.mpi(min_size=2)

DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_,
          np.complex128]


def test_tensors_and_arrays_round_trip_exactly(workers):
    rank, _ = workers
    if rank != 0:
        return
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        array = (rng.standard_normal((3, 5)) * 10).astype(dtype)
        back = rpc.rpc_sync(1, _remote.identity, args=(array,))
        assert type(back) is np.ndarray and back.dtype == array.dtype
        np.testing.assert_array_equal(back, array)
        tensor = mg.from_numpy(array.copy())
        back = rpc.rpc_sync(1, _remote.identity, args=(tensor,))
        assert isinstance(back, mg.Tensor) and back.dtype == tensor.dtype
        np.testing.assert_array_equal(back._array, tensor._array)


def test_shapes_views_and_large_tensors(workers):
    rank, _ = workers
    if rank != 0:
        return
    scalar = mg.tensor(2.5, dtype=mg.float64)
    assert rpc.rpc_sync(1, _remote.tensor_info, args=(scalar,)) == ("Tensor", "<f8", (), False)
    empty = np.zeros((0, 4), np.float32)
    assert rpc.rpc_sync(1, _remote.identity, args=(empty,)).shape == (0, 4)
    strided = np.arange(40.0).reshape(5, 8)[:, ::3]  # not contiguous: sent as a copy
    np.testing.assert_array_equal(rpc.rpc_sync(1, _remote.identity, args=(strided,)), strided)
    big = mg.from_numpy(np.random.default_rng(1).standard_normal(2 * 1024 * 1024))  # 16 MB
    np.testing.assert_array_equal(rpc.rpc_sync(1, _remote.scaled, args=(big, 2.0))._array,
                                  big._array * 2)


def test_requires_grad_is_kept_outside_a_context(workers):
    rank, _ = workers
    if rank == 0:
        t = mg.ones(2, requires_grad=True)
        assert rpc.rpc_sync(1, _remote.tensor_info, args=(t,))[3] is True
        back = rpc.rpc_sync(1, _remote.identity, args=(t,))
        assert back.requires_grad and back.is_leaf


def test_one_tensor_twice_in_a_message_stays_one_tensor(workers):
    rank, _ = workers
    if rank == 0:
        t = mg.arange(4, dtype=mg.float64)
        a, b = rpc.rpc_sync(1, _remote.identity, args=(t, t))
        assert a is b
        np.testing.assert_array_equal(a._array, t._array)


def test_tensors_inside_containers_and_objects(workers):
    rank, _ = workers
    if rank == 0:
        payload = {"w": [mg.ones(2), (np.arange(3), "s")], "n": None}
        back = rpc.rpc_sync(1, _remote.identity, args=(payload,))
        np.testing.assert_array_equal(back["w"][0]._array, np.ones(2))
        np.testing.assert_array_equal(back["w"][1][0], np.arange(3))
        assert back["w"][1][1] == "s" and back["n"] is None
        objects = np.array([{"a": 1}, None], dtype=object)  # no MPI type: goes by pickle
        assert rpc.rpc_sync(1, _remote.identity, args=(objects,))[0] == {"a": 1}


def test_views_keep_their_strides_inline_and_apart(workers):
    """As torch's RPC: a transposed, permuted or sliced tensor arrives with its strides, in
    a small message (its bytes inside the header) and a large one (a buffer of its own),
    when the memory it spans is at most twice its own; a sparser one (every other row)
    arrives as a C-contiguous copy."""
    rank, _ = workers
    if rank != 0:
        return
    for base in (np.arange(60.0).reshape(3, 4, 5),
                 np.arange(3 * 2**14, dtype=np.float64).reshape(3, 2**7, 2**7)):  # 1.5 MB
        for view, spanned in ((base.T, True), (base[:, :, 1:], True),
                              (base.transpose(1, 0, 2), True), (base[:, ::2, 1:], False)):
            back = rpc.rpc_sync(1, _remote.identity, args=(mg.Tensor.wrap(view),))
            if spanned:
                assert back._array.strides == view.strides
            else:
                assert back._array.flags.c_contiguous
            np.testing.assert_array_equal(back._array, view)
