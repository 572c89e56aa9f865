"""The gradient of a gather along one axis (x[:, positions], weight[ids]) against np.add.at,
which it replaces for speed: the same sums, repeats added in the same order (a position
repeated more than four times is summed by reduceat, whose order may differ by an ulp)."""
import numpy as np
import pytest

import mpigrad
from mpigrad.ops import shape


@pytest.mark.parametrize("shape_, index, exact", [
    ((5, 3), np.array([4, 0, 4, 1, 4]), True),                           # repeats, unsorted
    ((6, 4), np.array([[1, 1], [5, -1]]), True),                         # 2-D, negative
    ((2, 3, 7), (slice(None), slice(None), np.array([0, 0, 0, 1, 2, 2, 6])), True),
    ((2, 7, 3), (slice(None), np.array([3] * 9 + [0, 6])), False),       # a long run
    ((4, 2), np.array([], np.int64), True),
    ((3, 4), (np.array([0, 2, 0]), np.array([1, 1, 1])), True),          # two arrays
])
def test_gather_gradient_adds_every_occurrence_as_add_at(shape_, index, exact):
    rng = np.random.default_rng(0)
    x = mpigrad.tensor(rng.standard_normal(shape_), requires_grad=True)
    picked = x[index]
    g = rng.standard_normal(picked.shape)
    picked.backward(mpigrad.tensor(g))
    expected = np.zeros(shape_)
    np.add.at(expected, shape.normalize_index(index), g)
    if exact:
        np.testing.assert_array_equal(x.grad.numpy(), expected)
    else:
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-15, atol=0)
