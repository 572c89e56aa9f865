"""Ops are silent about floating-point errors (log(0), x/0, overflow), as torch's are, and
leave the caller's numpy error settings as they were."""
import warnings

import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def test_log_of_zero_and_division_by_zero_warn_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = mg.log(mg.tril(mg.ones(3, 3)))
        theirs = torch.log(torch.tril(torch.ones(3, 3)))
        np.testing.assert_array_equal(ours.data, theirs.numpy())
        x = mg.tensor([0.0, 1.0, 1e30], requires_grad=True)
        y = torch.tensor([0.0, 1.0, 1e30], requires_grad=True)
        (mg.log(x) + x * x * x / 0.0).sum().backward()  # inf and nan in forward and backward
        (torch.log(y) + y * y * y / 0.0).sum().backward()
        np.testing.assert_array_equal(x.grad.data, y.grad.numpy())
        x = mg.ones(2)
        x /= 0  # the in-place path outside the graph
        assert np.isinf(x.data).all()


def test_the_callers_numpy_settings_are_kept():
    before = np.geterr()
    with np.errstate(divide="raise"):
        mg.log(mg.zeros(1))
        with pytest.raises(FloatingPointError):
            np.log(np.zeros(1))
    assert np.geterr() == before
