"""Grad modes, in-place safety, version counters, dtype rules."""
import numpy as np
import pytest

import mpigrad as mg


def test_no_grad_builds_no_graph():
    x = mg.randn(3, requires_grad=True)
    with mg.no_grad():
        y = x * 2
    assert y.grad_fn is None and not y.requires_grad
    assert (x * 2).requires_grad


def test_grad_modes_as_decorators_and_nesting():
    x = mg.randn(3, requires_grad=True)

    @mg.no_grad()
    def f():
        with mg.enable_grad():
            inner = (x * 2).requires_grad
        return (x * 2).requires_grad, inner

    assert f() == (False, True)
    assert mg.is_grad_enabled()
    mg.set_grad_enabled(False)
    assert not (x * 2).requires_grad
    mg.set_grad_enabled(True)
    with mg.set_grad_enabled(False):
        assert not mg.is_grad_enabled()
    assert mg.is_grad_enabled()

    @mg.set_grad_enabled(False)
    def g():
        return mg.is_grad_enabled()

    assert mg.is_grad_enabled() and g() is False and mg.is_grad_enabled()


def test_modifying_a_saved_input_in_place_raises_naming_the_op():
    x = mg.randn(3, requires_grad=True)
    h = x * 1.0
    y = (h * h).sum()  # mul saves h
    h.add_(1)
    with pytest.raises(RuntimeError, match=r"modified by an in-place operation.*MulBackward"):
        y.backward()


def test_modifying_a_saved_output_in_place_raises():
    x = mg.randn(3, requires_grad=True)
    y = x.exp()
    z = y.sum()
    y += 1
    with pytest.raises(RuntimeError, match="ExpBackward.*version 1; expected version 0"):
        z.backward()


def test_in_place_on_a_tensor_the_graph_does_not_save_is_fine():
    x = mg.randn(3, requires_grad=True)
    h = x * 1.0
    y = (h + 1).sum()  # add saves nothing
    h.mul_(5)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3, np.float32))


def test_in_place_ops_are_recorded_in_the_graph():
    x = mg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = x * 2
    h.mul_(x)  # the gradient for x needs the old h: it is kept in a copy
    h.add_(1)
    h[0] = 0.0
    h.sum().backward()
    # d/dx of 2x * x + 1, with element 0 overwritten
    np.testing.assert_allclose(x.grad.numpy(), [0.0, -8.0, 12.0])
    g = x * 2
    g.relu_()  # relu saves its output, so changing it again must be caught, as in torch
    g.mul_(x)
    with pytest.raises(RuntimeError, match="ReluBackward"):
        g.sum().backward()


def test_in_place_op_that_consumes_its_own_target_raises_like_torch():
    x = mg.randn(3, requires_grad=True)
    h = x * 2
    h.mul_(h)  # `other` is saved, then overwritten by this very op
    with pytest.raises(RuntimeError, match="in-place"):
        h.sum().backward()


def test_view_shares_version_counter_with_its_base():
    x = mg.randn(4, requires_grad=True)
    h = x * 1.0
    y = (h.exp()).sum()  # exp saves its output, not h
    v = mg.randn(4)
    view = v[1:3]
    view.add_(1)
    assert v._version == 1
    h2 = x * 1.0
    y2 = (h2 * h2).sum()
    h2.detach()[0] = 5.0  # detach shares storage and version counter
    with pytest.raises(RuntimeError, match="in-place"):
        y2.backward()
    y.backward()


def test_in_place_on_a_leaf_that_requires_grad_raises_unless_no_grad():
    w = mg.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w.add_(1)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w[0] = 1.0
    before = w.detach().numpy().copy()
    with mg.no_grad():
        w.sub_(mg.ones(3), alpha=0.5)
    np.testing.assert_allclose(w.data, before - 0.5)
    assert w._version == 1


def test_numpy_on_tensor_that_requires_grad_raises_like_torch():
    w = mg.randn(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        w.numpy()
    assert w.detach().numpy() is w._array


def test_dtype_rules():
    assert mg.tensor(1.5).dtype == mg.float32
    assert mg.tensor([1, 2]).dtype == mg.int64
    assert mg.tensor([True]).dtype == mg.bool
    assert mg.tensor(np.ones(2)).dtype == mg.float64
    assert mg.tensor(np.ones(2, np.float32)).dtype == mg.float32
    x = mg.ones(2)
    assert x.dtype == mg.float32
    assert (x * 2.5).dtype == mg.float32 and (x / 3).dtype == mg.float32
    assert (x * mg.ones(2, dtype=mg.float64)).dtype == mg.float64
    with pytest.raises(RuntimeError, match="floating point"):
        mg.tensor([1, 2]).requires_grad_()
    with pytest.raises(TypeError, match="numbers"):
        mg.tensor(["a"])
    a = np.arange(3.0)
    t = mg.from_numpy(a)
    a[0] = 7
    assert t[0].item() == 7 and mg.tensor(a)._array is not a


def test_manual_seed_reproduces_random_tensors():
    mg.manual_seed(7)
    a = mg.randn(3, 2)
    mg.manual_seed(7)
    b = mg.randn(3, 2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    g = mg.Generator(3)
    state = g.get_state()
    first = mg.rand(4, generator=g)
    g.set_state(state)
    np.testing.assert_array_equal(first.numpy(), mg.rand(4, generator=g).numpy())


def test_detect_anomaly_names_the_op_that_made_nan():
    x = mg.tensor([0.0, 1.0], requires_grad=True)
    np.seterr(divide="ignore", invalid="ignore")
    with mg.autograd.detect_anomaly():
        y = x.sqrt()
        z = (y * 0.0).sum()
        with pytest.raises(RuntimeError, match=r"'SqrtBackward0' returned nan or inf(.|\n)*x.sqrt"):
            z.backward()
    # Outside anomaly mode the same computation quietly produces the nan.
    x.grad = None
    (x.sqrt() * 0.0).sum().backward()
    assert np.isnan(x.grad.numpy()[0])


def test_bad_shapes_give_clear_errors():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        mg.ones(2, 3) @ mg.ones(2, 3)
    with pytest.raises(RuntimeError, match="invalid for a tensor of size 6"):
        mg.ones(2, 3).reshape(4)
    with pytest.raises(RuntimeError, match="expand"):
        mg.ones(3).expand(2, 4)
    with pytest.raises(IndexError, match="Dimension out of range"):
        mg.ones(2, 3).sum(2)
