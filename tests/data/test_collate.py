from collections import OrderedDict, namedtuple

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.data import default_collate


def test_numpy_arrays_stack_keeping_dtype():
    batch = default_collate([np.full((2, 3), i, np.float16) for i in range(4)])
    assert isinstance(batch, mg.Tensor)
    assert batch.shape == (4, 2, 3) and batch.dtype == np.float16
    np.testing.assert_array_equal(batch.data[:, 0, 0], [0, 1, 2, 3])


def test_numpy_scalars_keep_dtype():
    batch = default_collate([np.float32(1.5), np.float32(2)])
    assert batch.dtype == np.float32 and batch.shape == (2,)
    assert default_collate([np.int8(1), np.int8(2)]).dtype == np.int8


def test_python_numbers_follow_pytorch_dtypes():
    assert default_collate([1, 2]).dtype == np.int64
    assert default_collate([True, False]).dtype == np.bool_
    floats = default_collate([1.0, 2.5])
    assert floats.dtype == np.float64
    np.testing.assert_array_equal(floats.data, [1.0, 2.5])


def test_tensors_stack():
    batch = default_collate([mg.tensor([1.0, 2.0]), mg.tensor([3.0, 4.0])])
    assert isinstance(batch, mg.Tensor)
    np.testing.assert_array_equal(batch.data, [[1, 2], [3, 4]])


def test_tuple_samples_collate_per_field_into_a_list():
    samples = [(np.zeros(3, np.float32), 1), (np.ones(3, np.float32), 0)]
    images, labels = batch = default_collate(samples)
    assert isinstance(batch, list)
    assert images.shape == (2, 3) and labels.dtype == np.int64
    np.testing.assert_array_equal(labels.data, [1, 0])


def test_mappings_and_named_tuples_keep_their_type():
    Pair = namedtuple("Pair", "x y")
    samples = [OrderedDict(pair=Pair(i, float(i)), name=f"s{i}") for i in range(3)]
    batch = default_collate(samples)
    assert isinstance(batch, OrderedDict) and isinstance(batch["pair"], Pair)
    np.testing.assert_array_equal(batch["pair"].x.data, [0, 1, 2])
    assert batch["pair"].y.dtype == np.float64
    assert batch["name"] == ["s0", "s1", "s2"]


def test_sequences_of_unequal_length_are_an_error():
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [3]])


def test_unsupported_elements_are_an_error():
    with pytest.raises(TypeError, match="found <class 'object'>"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="found <U1"):
        default_collate([np.array(["a"]), np.array(["b"])])
