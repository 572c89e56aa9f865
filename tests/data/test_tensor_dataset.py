import numpy as np
import pytest

import mpigrad as mg
from mpigrad.data import Dataset, Subset, TensorDataset


def test_samples_are_tuples_of_rows():
    x = mg.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3))
    y = mg.from_numpy(np.array([0, 1, 0, 1]))
    dataset = TensorDataset(x, y)
    assert len(dataset) == 4
    row, label = dataset[2]
    np.testing.assert_array_equal(row.data, [6, 7, 8])
    assert label.item() == 0
    assert dataset.tensors == (x, y)


def test_first_dimensions_must_agree():
    with pytest.raises(ValueError, match=r"Size mismatch between tensors.*\[4, 3\]"):
        TensorDataset(mg.from_numpy(np.zeros(4)), mg.from_numpy(np.zeros(3)))


def test_rejects_arrays_zero_d_tensors_and_nothing():
    with pytest.raises(TypeError, match="from_numpy"):
        TensorDataset(np.zeros(3))
    with pytest.raises(ValueError, match="0-d"):
        TensorDataset(mg.from_numpy(np.zeros(3)), mg.from_numpy(np.array(1.0)))
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()


def test_subset_maps_positions_through_indices():
    base = TensorDataset(mg.from_numpy(np.arange(10)))
    subset = Subset(base, [7, 2, 5])
    assert len(subset) == 3
    assert [subset[i][0].item() for i in range(3)] == [7, 2, 5]


def test_base_dataset_requires_getitem():
    class Incomplete(Dataset):
        pass

    with pytest.raises(NotImplementedError, match="Incomplete must implement __getitem__"):
        Incomplete()[0]
