"""The scatter-add behind indexing's gradient (embeddings, gathers along one axis): repeated
and negative positions, any axis, float32 and float64 against torch; other dtypes through
np.add.at."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.kernels.numpy.indexing import index_scatter  # noqa: E402

from .torch_check import check  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_embedding_gradient_adds_repeats(dtype):
    ids = np.array([[3, 1, 3, 3], [0, 9, 1, 3]])
    check(lambda w: mg.nn.functional.embedding(mg.tensor(ids), w),
          lambda w: torch.nn.functional.embedding(torch.tensor(ids), w),
          [np.random.default_rng(0).standard_normal((10, 6))], dtype)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_along_any_axis_with_negative_positions(axis):
    positions = np.array([2, -1, 0, 2, 2])
    index = (slice(None),) * axis + (positions,)
    check(lambda x: x[index], lambda x: x[(slice(None),) * axis + (torch.tensor(positions),)],
          [np.random.default_rng(1).standard_normal((3, 4, 5))], np.float64)


def test_other_dtypes_and_bad_positions():
    g = np.arange(6, dtype=np.int64).reshape(3, 2)
    np.testing.assert_array_equal(index_scatter(g, np.array([1, 1, 0]), (2, 2)),
                                  [[4, 5], [2, 4]])
    with pytest.raises(IndexError, match="out of bounds"):
        index_scatter(np.ones((2, 2)), np.array([0, 5]), (3, 2))
