"""Tensor hooks, post-accumulate hooks, end-of-backward callbacks, custom Functions."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import autograd
from mpigrad.autograd import Function


def test_register_hook_can_replace_the_gradient():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    handle = h.register_hook(lambda g: g * 10)
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [30.0, 30.0])
    handle.remove()
    x.grad = None
    h = x * 3
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_leaf_hook_runs_before_accumulation():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    (x * x).sum().backward()
    np.testing.assert_allclose(seen[0], [2.0, 4.0])
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_post_accumulate_hooks_fire_once_after_grad_is_complete_and_early():
    w1 = mg.randn(3, 3, requires_grad=True)
    w2 = mg.randn(3, 3, requires_grad=True)
    x = mg.randn(2, 3)
    events = []

    def hook(name):
        def record(p):
            events.append((name, p.grad.numpy().copy()))
        return record

    w1.register_post_accumulate_grad_hook(hook("w1"))
    w2.register_post_accumulate_grad_hook(hook("w2"))
    # w1 is used twice; its hook must see the sum of both contributions, once.
    h = (x @ w1).tanh() @ w1
    loss = (h @ w2).sum()
    loss.backward()
    names = [n for n, _ in events]
    assert names == ["w2", "w1"]  # w2's gradient is final first
    np.testing.assert_allclose(events[1][1], w1.grad.numpy())


def test_queue_callback_runs_once_at_the_end_of_backward():
    w = mg.randn(3, requires_grad=True)
    log = []

    def hook(p):
        log.append("hook")
        if len(log) == 1:
            autograd.queue_callback(lambda: log.append("end"))

    w.register_post_accumulate_grad_hook(hook)
    (w * 2).sum().backward()
    assert log == ["hook", "end"]
    with pytest.raises(RuntimeError, match="while a backward pass is running"):
        autograd.queue_callback(lambda: None)


def test_every_queued_callback_runs_even_when_one_raises_and_the_first_error_wins():
    w = mg.randn(3, requires_grad=True)
    log = []

    def fail(name):
        def callback():
            log.append(name)
            raise ValueError(name)
        return callback

    def hook(p):
        autograd.queue_callback(fail("first"))
        autograd.queue_callback(fail("second"))
        autograd.queue_callback(lambda: log.append("third"))

    w.register_post_accumulate_grad_hook(hook)
    with pytest.raises(ValueError, match="first"):
        (w * 2).sum().backward()
    assert log == ["first", "second", "third"]


def test_a_failed_pass_runs_the_on_error_callbacks_instead_and_raises_its_error():
    x = mg.randn(3, requires_grad=True)
    y = x * 2
    log = []

    def start(grad):
        autograd.queue_callback(lambda: log.append("finished"),
                                on_error=lambda error: log.append(("failed", str(error))))
        autograd.queue_callback(lambda: log.append("no on_error: skipped"))

    def fail(grad):
        raise ValueError("bad gradient")

    y.register_hook(start)
    x.register_hook(fail)  # runs after y's hook queued the callbacks
    with pytest.raises(ValueError, match="bad gradient"):
        y.sum().backward()
    assert log == [("failed", "bad gradient")]
    assert autograd.engine.current_task() is None


def test_an_on_error_callback_that_raises_replaces_the_error_caused_by_it():
    x = mg.randn(3, requires_grad=True)
    y = x * 2

    def replace(error):
        raise RuntimeError("settled") from error

    y.register_hook(lambda grad: autograd.queue_callback(lambda: None, on_error=replace))
    x.register_hook(lambda grad: 1 / 0)
    with pytest.raises(RuntimeError, match="settled") as info:
        y.sum().backward()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_retain_grad_keeps_a_non_leaf_gradient():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.data)
    assert (x * 3).grad is None


class ScaledExp(Function):
    @staticmethod
    def forward(ctx, x, scale):
        out = x.exp() * scale
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        assert ctx.needs_input_grad == (True, False)
        return g * out, None


def test_custom_function_forward_backward_and_gradcheck(float64):
    x = mg.tensor([0.1, -0.5, 1.0], requires_grad=True)
    assert autograd.gradcheck(lambda t: ScaledExp.apply(t, 2.0), (x,))
    y = ScaledExp.apply(x, 2.0)
    assert y.grad_fn.name() == "ScaledExpBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.data))


def test_custom_function_detects_in_place_change_of_saved_tensor():
    x = mg.randn(3, requires_grad=True)
    y = ScaledExp.apply(x, 1.0)
    with mg.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match="saved tensor 0 of ScaledExpBackward"):
        y.sum().backward()


def test_custom_function_wrong_number_of_gradients():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g

    a, b = mg.randn(2, requires_grad=True), mg.randn(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Bad.apply(a, b).sum().backward()


def test_custom_function_with_multiple_outputs():
    class SplitTwo(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, ga, gb):
            return ga * 2 + gb * 3

    x = mg.randn(3, requires_grad=True)
    a, b = SplitTwo.apply(x)
    a.sum().backward()  # b's gradient is materialised as zeros
    np.testing.assert_allclose(x.grad.numpy(), 2.0)
