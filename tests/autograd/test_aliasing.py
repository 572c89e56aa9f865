"""Regressions: views and shared storage must never give a silently wrong gradient."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad.autograd import Function


def test_view_taken_before_an_in_place_change_of_its_base_refuses_backward():
    a = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = a * 1
    v = x[0:2]
    x.mul_(2)  # v now reads 2*a, but its recorded history says a
    with pytest.raises(RuntimeError, match="in-place operation: input 0 of SliceBackward0"):
        v.sum().backward()


def test_view_node_can_be_differentiated_twice():
    x = mg.randn(2, 3, requires_grad=True)
    y = x.reshape(6)  # saves nothing, so its node is not freed by the first backward
    y.sum().backward()
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * np.ones((2, 3), np.float32))


def test_recorded_in_place_write_into_a_view_is_refused():
    w = mg.tensor([3.0, 4.0], requires_grad=True)
    b = mg.zeros(2, 2)
    with pytest.raises(RuntimeError, match="cannot write into a view"):
        b[0].copy_(w * 1)
    b[0] = w * 1  # item assignment on the tensor itself is recorded on it
    (b.reshape(4) * mg.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0])


def test_advanced_index_result_is_a_copy_with_its_own_version_counter():
    y = mg.randn(3, 4, requires_grad=True) * 1
    picked = y[:, [0, 2]]
    assert picked._vc is not y._vc and picked._base is None
    loss = (y * y).sum()
    with mg.no_grad():
        picked.add_(1)
    loss.backward()  # y itself was not touched


def test_gradient_kept_by_a_hook_is_not_overwritten_by_later_accumulation():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    logged = []
    x.register_hook(logged.append)
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(logged[0].numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0])


def test_custom_function_returning_an_alias_of_its_gradient_does_not_leak_it_into_grad():
    class PassThrough(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g.detach()  # same storage as the caller's gradient

    x = mg.tensor([1.0, 1.0], requires_grad=True)
    seed = mg.tensor([1.0, 1.0])
    PassThrough.apply(x).backward(seed)
    PassThrough.apply(x).backward(seed)
    np.testing.assert_array_equal(seed.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
