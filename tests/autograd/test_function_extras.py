"""Function.mark_dirty and once_differentiable, against torch."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad.autograd.function import once_differentiable

torch = pytest.importorskip("torch")
VALUES = np.array([0.5, -1.0, 2.0])


def _double_in_place(lib):
    class DoubleInPlace(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2
    return DoubleInPlace


def _forgets_output(lib):
    class ForgetsOutput(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g
    return ForgetsOutput


@pytest.mark.parametrize("lib", [mg, torch], ids=["mpigrad", "torch"])
def test_mark_dirty_keeps_the_object_and_continues_its_history(lib):
    a = lib.tensor(VALUES.copy(), requires_grad=True)
    h = a * 3
    version = h._version
    out = _double_in_place(lib).apply(h)
    assert out is h and h._version > version
    assert h.grad_fn.name() == "DoubleInPlaceBackward"
    (h * h).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * (6 * VALUES) * 6)


@pytest.mark.parametrize("lib", [mg, torch], ids=["mpigrad", "torch"])
def test_mark_dirty_makes_saved_copies_stale_even_for_writes_through_data(lib):
    class DoubleThroughData(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.data.__imul__(2)  # a write autograd does not see; mark_dirty declares it
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    a = lib.tensor(VALUES.copy(), requires_grad=True)
    h = a * 1
    squared = h * h  # saves h as it is now
    DoubleThroughData.apply(h)
    with pytest.raises(RuntimeError, match="modified by an inplace|modified by an in-place"):
        squared.sum().backward()


@pytest.mark.parametrize("lib", [mg, torch], ids=["mpigrad", "torch"])
def test_mark_dirty_refuses_a_leaf_that_requires_grad(lib):
    with pytest.raises(RuntimeError, match="leaf"):
        _double_in_place(lib).apply(lib.tensor(VALUES.copy(), requires_grad=True))


@pytest.mark.parametrize("lib", [mg, torch], ids=["mpigrad", "torch"])
def test_a_dirty_tensor_must_be_returned(lib):
    with pytest.raises(RuntimeError, match="(?i)dirty.*not returned|were not returned"):
        _forgets_output(lib).apply(lib.tensor(VALUES.copy(), requires_grad=True) * 1)


def _cube(lib, decorate):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @decorate
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            assert not lib.is_grad_enabled()
            return g * 3 * x * x
    return Cube


@pytest.mark.parametrize("lib", [mg, torch], ids=["mpigrad", "torch"])
def test_once_differentiable_gives_first_order_and_refuses_second(lib):
    decorate = (once_differentiable if lib is mg
                else torch.autograd.function.once_differentiable)
    cube = _cube(lib, decorate)
    x = lib.tensor(VALUES.copy(), requires_grad=True)
    (g,) = lib.autograd.grad(cube.apply(x).sum(), x)
    np.testing.assert_allclose(g.numpy(), 3 * VALUES ** 2)
    # The incoming gradient 2y requires grad under create_graph, so the result is marked.
    (g,) = lib.autograd.grad((cube.apply(x) ** 2).sum(), x, create_graph=True)
    assert g.requires_grad
    np.testing.assert_allclose(g.detach().numpy(), 6 * VALUES ** 5)
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked "
                                           "with @once_differentiable"):
        g.sum().backward()
