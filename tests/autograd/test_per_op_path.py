"""What the per-op fast paths must keep doing: the engine's order (the ready heap, and the
chain's next node that skips it), leaves' gradients never aliased, every saved input's
version check, anomaly mode's creation stacks, and mul's and div's fused backwards equal to
their rules and to torch's."""
import warnings

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import autograd

torch = pytest.importorskip("torch")


def _hook_order(lib, seed):
    """The order in which backward reaches the intermediate tensors of a small random DAG
    of primitive ops, as each library's tensor hooks see it."""
    rng = np.random.default_rng(seed)
    leaves = [lib.tensor(rng.standard_normal(3), requires_grad=True) for _ in range(3)]
    values = list(leaves)
    order = []
    for step in range(12):
        a, b = (values[i] for i in rng.integers(0, len(values), 2))
        kind = rng.integers(0, 3)
        out = a * b if kind == 0 else a + b if kind == 1 else (a - b).tanh()
        out.register_hook(lambda g, step=step: order.append(step))
        values.append(out)
    # The two last values and one earlier one feed the loss, so several branches wait.
    loss = values[-1].sum() + values[-2].sum() + values[5].sum()
    for i, leaf in enumerate(leaves):
        leaf.register_post_accumulate_grad_hook(lambda t, i=i: order.append(f"leaf {i}"))
    loss.backward()
    return order


@pytest.mark.parametrize("seed", range(6))
def test_backward_reaches_nodes_and_leaves_in_torchs_order(seed):
    # Both engines run the most recently created ready node first and a leaf's accumulation
    # before anything else; the node that a node alone made ready skips the heap.
    assert _hook_order(mg, seed) == _hook_order(torch, seed)


def test_leaves_made_ready_together_accumulate_in_the_order_of_their_edges():
    a, b, c = (mg.randn(2, requires_grad=True) for _ in range(3))
    order = []
    for name, leaf in zip("abc", (a, b, c)):
        leaf.register_post_accumulate_grad_hook(lambda t, name=name: order.append(name))
    mg.cat([a, b, c]).sum().backward()
    assert order == ["a", "b", "c"]


def test_a_leaf_keeps_a_fresh_gradient_and_copies_one_that_is_seen_elsewhere():
    x = mg.randn(3, requires_grad=True)
    y = mg.randn(3, requires_grad=True)
    seed = mg.ones(3)
    (x * 2 + y).backward(seed)  # y's gradient is the seed itself, passed through
    assert not np.shares_memory(y.grad._array, seed._array)
    assert not np.shares_memory(x.grad._array, y.grad._array)
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 2, np.float32))
    seed._array[:] = 5  # the caller's array changes; the leaf's gradient does not
    np.testing.assert_array_equal(y.grad.numpy(), np.ones(3, np.float32))


@pytest.mark.parametrize("position", [0, 1])
def test_an_in_place_change_of_either_saved_input_is_refused(position):
    a = mg.randn(3, requires_grad=True) * 1
    b = mg.randn(3, requires_grad=True) * 1
    product = a * b
    with mg.no_grad():
        (a, b)[position].add_(1)
    with pytest.raises(RuntimeError, match=f"input {position} of MulBackward0"):
        product.sum().backward()


def test_an_in_place_change_of_a_views_base_is_refused():
    base = mg.randn(2, 3, requires_grad=True) * 1
    view = base.transpose(0, 1)
    with mg.no_grad():
        base.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        view.sum().backward()


def test_anomaly_mode_records_each_nodes_creation_and_costs_nothing_outside_it():
    x = mg.randn(2, requires_grad=True)
    with autograd.detect_anomaly():
        inside = x * 2
    outside = x * 2
    assert "test_per_op_path.py" in inside.grad_fn.creation_stack
    assert outside.grad_fn.creation_stack is None


def test_retain_grad_and_tensor_hooks_on_a_chain():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    middle = x * 3
    middle.retain_grad()
    seen = []
    middle.register_hook(lambda g: seen.append(g.numpy().copy()))
    (middle * middle).sum().backward()
    np.testing.assert_array_equal(middle.grad.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(seen[0], [6.0, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [18.0, 36.0])


@pytest.mark.parametrize("op", ["mul", "div"])
def test_fused_products_and_quotients_equal_the_rules_and_torch(op, rng):
    # Broadcasting both ways, a Python number and a 0-d tensor, in float32.
    shapes = [((4, 1, 3), (5, 1)), ((3,), ()), ((2, 3), None)]
    for shape_a, shape_b in shapes:
        a_np = rng.standard_normal(shape_a).astype(np.float32)
        b_np = 1.5 if shape_b is None else (rng.standard_normal(shape_b) + 3).astype(np.float32)

        def grads(lib, create_graph):
            a = lib.tensor(a_np, requires_grad=True)
            b = b_np if shape_b is None else lib.tensor(b_np, requires_grad=True)
            out = a * b if op == "mul" else a / b
            inputs = [a] if shape_b is None else [a, b]
            g = lib.tensor(np.linspace(-1, 1, out.numel(), dtype=np.float32).reshape(out.shape))
            return [t.detach().numpy() for t in lib.autograd.grad(
                out, inputs, g, create_graph=create_graph)]

        fused = grads(mg, False)
        for mine, rules in zip(fused, grads(mg, True)):
            np.testing.assert_array_equal(mine, rules)
        for mine, theirs in zip(fused, grads(torch, False)):
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
            np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-6)


def test_a_sparse_gradient_reaching_a_product_takes_the_rules():
    w = mg.randn(5, 3, requires_grad=True)
    indices = mg.tensor([0, 2, 2, 4])
    mg.nn.functional.embedding(indices, w * 2, sparse=True).sum().backward()
    assert w.grad.is_sparse  # as torch's: the rule scales the sparse gradient
    sparse_grad = w.grad.to_dense().numpy().copy()
    w.grad = None
    mg.nn.functional.embedding(indices, w * 2).sum().backward()
    np.testing.assert_array_equal(sparse_grad, w.grad.numpy())


def test_fused_backwards_are_silent_about_overflow_as_torch_is():
    x = mg.tensor([3e38], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (x * 10.0).backward(mg.tensor([3e38]))
        (x / 1e-30).backward(mg.tensor([3e38]))
    assert np.isinf(x.grad.numpy()).all()
