"""autograd.Variable behaves as torch's deprecated alias does."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad.autograd import Variable


def test_variable_is_a_new_leaf_on_the_same_storage():
    t = mg.ones(2)
    v = Variable(t, requires_grad=True)
    assert v is not t and v.requires_grad and v.is_leaf and not t.requires_grad
    assert np.shares_memory(v.data, t.data)
    (v * 3).sum().backward()
    np.testing.assert_array_equal(v.grad.data, [3, 3])


def test_every_tensor_is_a_variable_and_history_is_not_followed():
    w = mg.ones(2, requires_grad=True)
    u = Variable(w * 2)
    assert isinstance(w, Variable) and isinstance(u, Variable) and not isinstance([1], Variable)
    assert u.grad_fn is None and u.is_leaf and not u.requires_grad


def test_bad_data_and_volatile_as_torch():
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
        Variable([1, 2])
    with pytest.warns(UserWarning, match="volatile was removed"):
        Variable(mg.ones(1), volatile=True)
