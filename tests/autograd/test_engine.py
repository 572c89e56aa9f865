"""The backward engine: ordering, accumulation, retain_graph, grad(), create_graph."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import autograd
from mpigrad.autograd import Function


class Counting(Function):
    calls = 0

    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        Counting.calls += 1
        return g


def test_each_node_runs_once_after_all_its_consumers():
    x = mg.randn(4, requires_grad=True)
    Counting.calls = 0
    shared = Counting.apply(x)
    # Three consumers of `shared` on paths of different length.
    loss = (shared * 2).sum() + (shared.exp() * 3).tanh().sum() + shared.sum()
    loss.backward()
    assert Counting.calls == 1
    expected = 2 + 3 * np.exp(x.data) * (1 - np.tanh(3 * np.exp(x.data)) ** 2) + 1
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5)


def test_gradients_accumulate_across_backward_calls():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2, 3 + 4])


def test_two_leaves_never_share_a_grad_array():
    a = mg.randn(3, requires_grad=True)
    b = mg.randn(3, requires_grad=True)
    (a + b).sum().backward()  # add passes the same gradient object to both inputs
    assert not np.shares_memory(a.grad.data, b.grad.data)
    a.grad.data += 1
    np.testing.assert_array_equal(b.grad.numpy(), np.ones(3, np.float32))


def test_expanded_gradient_is_stored_as_a_writable_copy():
    x = mg.randn(3, requires_grad=True)
    x.sum().backward()
    assert x.grad._array.flags.writeable and x.grad._array.flags.c_contiguous


def test_second_backward_through_freed_graph_says_to_retain_graph():
    x = mg.randn(3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_non_scalar_backward_needs_a_gradient():
    x = mg.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(mg.tensor([1.0, 0.0, 2.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0, 4.0])


def test_backward_on_tensor_without_graph_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        mg.ones(2).sum().backward()


def test_grad_returns_without_touching_dot_grad():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    w = mg.tensor([3.0, 4.0], requires_grad=True)
    (gx,) = autograd.grad((x * w).sum(), x)
    np.testing.assert_allclose(gx.numpy(), [3.0, 4.0])
    assert x.grad is None and w.grad is None


def test_grad_of_a_non_leaf_input():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    (gh,) = autograd.grad((h * h).sum(), h)
    np.testing.assert_allclose(gh.numpy(), 2 * h.data)


def test_grad_unused_input():
    x = mg.randn(2, requires_grad=True)
    y = mg.randn(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        autograd.grad((x * 2).sum(), [x, y])
    gx, gy = autograd.grad((x * 2).sum(), [x, y], allow_unused=True)
    assert gy is None
    gx, gy = autograd.grad((x * 2).sum(), [x, y], materialize_grads=True)
    np.testing.assert_array_equal(gy.numpy(), 0)


def test_create_graph_gives_second_derivatives(float64):
    x = mg.tensor([0.3, -1.2, 2.0], requires_grad=True)
    y = (x.sin() * x ** 2).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    (h,) = autograd.grad(g.sum(), x)
    xs = x.data
    expected = -xs ** 2 * np.sin(xs) + 4 * xs * np.cos(xs) + 2 * np.sin(xs)
    np.testing.assert_allclose(h.numpy(), expected, rtol=1e-12)


def test_hessian_vector_product_matches_explicit_hessian(float64, rng):
    from mpigrad.autograd.functional import hessian, hvp
    a = mg.tensor(rng.standard_normal((4, 4)))

    def f(x):
        return (x @ a @ x).tanh() + (x ** 3).sum()

    x = mg.tensor(rng.standard_normal(4))
    v = mg.tensor(rng.standard_normal(4))
    H = hessian(f, x)
    _, hv = hvp(f, x, v)
    np.testing.assert_allclose(hv.numpy(), H.numpy() @ v.numpy(), rtol=1e-10)
    np.testing.assert_allclose(H.numpy(), H.numpy().T, rtol=1e-10)


def test_jacobian_and_jvp_vjp_agree(float64, rng):
    from mpigrad.autograd.functional import jacobian, jvp, vjp
    w = mg.tensor(rng.standard_normal((3, 4)))

    def f(x):
        return (w @ x).sigmoid()

    x = mg.tensor(rng.standard_normal(4))
    J = jacobian(f, x).numpy()
    v = rng.standard_normal(4)
    u = rng.standard_normal(3)
    np.testing.assert_allclose(jvp(f, x, mg.tensor(v))[1].numpy(), J @ v, rtol=1e-10)
    np.testing.assert_allclose(vjp(f, x, mg.tensor(u))[1].numpy(), u @ J, rtol=1e-10)
    assert not x.requires_grad


def test_maml_style_gradient_through_an_inner_update(float64, rng):
    # Inner step w' = w - lr * dL_train/dw; outer loss on w'. The outer gradient includes the
    # second-order term, which we check against finite differences of the whole procedure.
    xtr, ytr = rng.standard_normal((5, 3)), rng.standard_normal(5)
    xte, yte = rng.standard_normal((4, 3)), rng.standard_normal(4)
    lr = 0.1

    def outer(w):
        inner = ((mg.tensor(xtr) @ w - mg.tensor(ytr)) ** 2).mean()
        (gw,) = autograd.grad(inner, w, create_graph=True)
        adapted = w - lr * gw
        return ((mg.tensor(xte) @ adapted - mg.tensor(yte)) ** 2).mean()

    w = mg.tensor(rng.standard_normal(3), requires_grad=True)
    outer(w).backward()
    numerical = np.zeros(3)
    for i in range(3):
        for sign in (1, -1):
            shifted = w.detach().clone()
            shifted.data[i] += sign * 1e-6
            shifted.requires_grad_()
            numerical[i] += sign * outer(shifted).item() / 2e-6
    np.testing.assert_allclose(w.grad.numpy(), numerical, rtol=1e-6)


def test_engine_runs_most_recent_ready_node_first():
    order = []
    x = mg.randn(2, requires_grad=True)
    a = x * 2
    b = x * 3
    a.register_hook(lambda g: order.append("a"))
    b.register_hook(lambda g: order.append("b"))
    (a.sum() + b.sum()).backward()
    assert order == ["b", "a"]


def test_a_gradient_is_fresh_only_if_no_other_gradient_is_it_or_a_view_of_it():
    from mpigrad.autograd.engine import _is_fresh
    owner = mg.tensor(np.arange(6.0))
    other = mg.tensor(np.arange(6.0))
    assert _is_fresh(owner, [other], [None])
    assert not _is_fresh(owner, [owner])                       # passed straight through
    assert not _is_fresh(owner, [], [owner.reshape(2, 3)])     # a sibling views it
    assert not _is_fresh(owner.reshape(2, 3), [other])         # a view of something else
    assert not _is_fresh(owner[::2], [])


def _split_use(lib, x, retained):
    """A split whose pieces meet again with other uses of the same tensor: some pieces'
    gradients arrive before the whole's (broadcast views, not fresh), others after."""
    a = x * 2.0
    a.retain_grad()
    q, k, v = a.split(2, dim=1)
    retained.append(k)
    k.retain_grad()
    first = (q * q).sum() + (a.sum(1, keepdim=True) * a[:, :1]).sum()
    return first + (k.exp() * v).sum() + (v[:, ::2] * 3).sum() + a[0].sum()


@pytest.mark.parametrize("create_graph", [False, True])
def test_pieces_of_a_split_meet_in_one_gradient_as_in_torch(create_graph, float64, rng,
                                                            monkeypatch):
    """Slices' gradients are added into the gradient so far in place when only backward
    holds it (engine's _scattered); retained and captured gradients are not changed by it."""
    torch = pytest.importorskip("torch")
    from mpigrad.autograd import engine
    scattered = []
    real = engine._scattered
    monkeypatch.setattr(engine, "_scattered", lambda *args: scattered.append(real(*args))
                        or scattered[-1])
    xv = rng.standard_normal((3, 6))
    results = []
    for lib in (mg, torch):
        x = lib.tensor(xv, requires_grad=True)
        retained = []
        loss = _split_use(lib, x, retained)
        (gx,) = lib.autograd.grad(loss, x, create_graph=create_graph, retain_graph=True)
        if lib is mg:  # in place only without a graph of the gradients
            assert (True in scattered) != create_graph
        loss.backward()
        results.append([gx.detach().numpy(), x.grad.numpy(), retained[0].grad.numpy()])
    for mine, theirs in zip(*results):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
    assert True in scattered and False in scattered  # the first piece's gradient makes one


def test_gradients_summed_in_place_leave_the_addends_alone(float64, rng):
    """A gradient that another node or hook still sees is never the array a sum is made in:
    a passed-through gradient (add's) and one a hook keeps stay as they were."""
    xv = rng.standard_normal((4, 5))
    x = mg.tensor(xv, requires_grad=True)
    kept = []
    a = x * 1.0
    a.register_hook(lambda g: kept.append(g.numpy().copy()) or None)
    b = a + a  # backward passes the incoming gradient to both inputs
    b.register_hook(lambda g: kept.append(g))
    (b[:2].sum() + b[1:].sum() * 2 + b.sum()).backward()
    expected_b = np.ones((4, 5)) + 2 * (np.arange(4) >= 1)[:, None] + (np.arange(4) < 2)[:, None]
    np.testing.assert_array_equal(kept[0].numpy(), expected_b)
    np.testing.assert_array_equal(kept[1], 2 * expected_b)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * expected_b)
