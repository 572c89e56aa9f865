"""Tensor's named operations on its autograd state: wrap, alias, writing, mark_written,
set_history, and the zero_grads helper that Module and Optimizer share; and its strides."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.tensor import Tensor, zero_grads


def test_wrap_shares_the_array_and_starts_a_new_version_counter():
    array = np.arange(3.0)
    t = Tensor.wrap(array)
    assert t._array is array and t._version == 0 and t.is_leaf and not t.requires_grad
    assert Tensor.wrap(array)._vc is not t._vc


def test_alias_shares_storage_and_version_and_points_at_the_root_base():
    base = mg.arange(6.0)
    view = base.alias(base._array[1:4])
    nested = view.alias()
    assert view._base is base and nested._base is base
    with view.writing() as data:
        data[0] = 10.0
    assert base._array[1] == 10.0 and base._version == nested._version == 1
    detached = base.alias(view=False)
    assert detached._base is None and detached._vc is base._vc


def test_writing_marks_the_tensor_written_even_when_the_write_fails():
    t = mg.zeros(3)
    with pytest.raises(ValueError):
        with t.writing() as data:
            data[:] = [1.0, 2.0]  # wrong length: numpy raises
    assert t._version == 1


def test_a_write_through_writing_is_seen_by_backward():
    x = mg.randn(3, requires_grad=True)
    y = x * 1.0
    z = y.exp()  # saves its output
    with z.writing() as data:
        data += 1
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        z.sum().backward()


def test_mark_written_is_a_version_bump():
    t = mg.zeros(2)
    t.mark_written()
    assert t._version == 1


def test_set_history_makes_the_tensor_an_output_of_the_node():
    x = mg.randn(2, requires_grad=True)
    node = (x * 2).grad_fn
    t = Tensor.wrap(np.zeros(2))
    t.set_history(node, 0)
    assert t.grad_fn is node and t.requires_grad and not t.is_leaf


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grads_drops_or_zeroes_in_place(set_to_none):
    a, b = mg.randn(2, requires_grad=True), mg.randn(3, requires_grad=True)
    a.grad = mg.ones(2)
    kept = a.grad
    zero_grads([a, b], set_to_none)
    assert b.grad is None
    if set_to_none:
        assert a.grad is None
    else:
        assert a.grad is kept and kept._version == 1
        np.testing.assert_array_equal(kept._array, 0)


def test_optimizer_step_marks_parameters_written():
    model = nn.Linear(2, 1)
    opt = mg.optim.SGD(model.parameters(), lr=0.1)
    model(mg.randn(4, 2)).sum().backward()
    before = [p._version for p in model.parameters()]
    opt.step()
    assert [p._version for p in model.parameters()] == [v + 1 for v in before]


def test_stride_counts_elements_as_torchs():
    torch = pytest.importorskip("torch")
    base = np.arange(24.0).reshape(2, 3, 4)
    views = [lambda t: t, lambda t: t.transpose(0, 2), lambda t: t[:, ::2, 1:],
             lambda t: t[0, 1].expand(5, 4), lambda t: t.float().permute(1, 2, 0)]
    for view in views:
        ours, theirs = view(mg.tensor(base)), view(torch.tensor(base))
        assert ours.stride() == theirs.stride()
        assert [ours.stride(d) for d in range(-ours.dim(), ours.dim())] == \
            [theirs.stride(d) for d in range(-theirs.dim(), theirs.dim())]
    with pytest.raises(IndexError, match=r"range of \[-3, 2\], but got 3"):
        mg.tensor(base).stride(3)
    assert mg.tensor(1.0).stride() == ()
    with pytest.raises(IndexError, match="no dimensions"):
        mg.tensor(1.0).stride(0)
