"""LBFGS takes torch's steps: the same parameters and losses after several steps in float64,
with a fixed step and with the strong-Wolfe line search, and torch's state and errors."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import optim

torch = pytest.importorskip("torch")


def _fit(lib, optimizer_class, kwargs, steps=3):
    """A small tanh network regressing a fixed target (non-quadratic, so the line search and
    the curvature history both matter); the parameters and closure losses after each step."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3))
    y = np.sin(x @ [[1.0], [-2.0], [0.5]]) + 0.1 * rng.standard_normal((64, 1))
    w1, w2 = rng.standard_normal((3, 5)) * 0.5, rng.standard_normal((5, 1)) * 0.5
    params = [lib.tensor(w1, requires_grad=True), lib.tensor(w2, requires_grad=True)]
    x, y = lib.tensor(x), lib.tensor(y)
    optimizer = optimizer_class(params, **kwargs)

    def closure():
        optimizer.zero_grad()
        loss = ((lib.tanh(x @ params[0]) @ params[1] - y) ** 2).mean()
        loss.backward()
        return loss

    history = []
    for _ in range(steps):
        loss = optimizer.step(closure)
        history.append((loss.item(), [np.array(p.detach().numpy()) for p in params]))
    return history, optimizer


# Each step runs up to max_iter iterations; over many of them, the last-bit differences of
# the two libraries' sums grow (L-BFGS divides by small curvatures near a minimum), so the
# fits are kept to a few dozen iterations, where they agree to 1e-10.
@pytest.mark.parametrize("kwargs", [
    dict(max_iter=6), dict(line_search_fn="strong_wolfe", max_iter=6),
    dict(lr=0.5, history_size=3, max_iter=7),
    dict(line_search_fn="strong_wolfe", history_size=2, max_iter=10),
    dict(tolerance_change=1e-3, max_iter=30),
], ids=["default", "strong_wolfe", "short_history", "wolfe_short_history", "loose"])
def test_lbfgs_matches_torch_over_several_steps(kwargs):
    ours, ours_optimizer = _fit(mg, optim.LBFGS, kwargs)
    theirs, their_optimizer = _fit(torch, torch.optim.LBFGS, kwargs)
    for (our_loss, our_params), (their_loss, their_params) in zip(ours, theirs):
        np.testing.assert_allclose(our_loss, their_loss, rtol=1e-10)
        for a, b in zip(our_params, their_params):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    if "line_search_fn" in kwargs:  # the line search only ever lowers the loss
        assert ours[-1][0] < ours[0][0] / 2
    our_state = ours_optimizer.state_dict()["state"][0]
    their_state = their_optimizer.state_dict()["state"][0]
    assert our_state["func_evals"] == their_state["func_evals"]
    assert our_state["n_iter"] == their_state["n_iter"]
    assert len(our_state["old_dirs"]) == len(their_state["old_dirs"])


def test_lbfgs_float32_matches_torch_to_float32_precision():
    def fit(lib):
        w = lib.tensor(np.array([1.5, -0.5], dtype=np.float32), requires_grad=True)
        optimizer = (optim.LBFGS if lib is mg else torch.optim.LBFGS)(
            [w], line_search_fn="strong_wolfe")

        def closure():
            optimizer.zero_grad()
            loss = (1 - w[0]) ** 2 + 100 * (w[1] - w[0] ** 2) ** 2  # Rosenbrock
            loss.backward()
            return loss
        for _ in range(3):
            optimizer.step(closure)
        return w.detach().numpy()
    ours, theirs = fit(mg), fit(torch)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours, [1, 1], atol=1e-3)


def test_lbfgs_errors_as_torch():
    for lib, cls in ((mg, optim.LBFGS), (torch, torch.optim.LBFGS)):
        a, b = lib.ones(2, requires_grad=True), lib.ones(2, requires_grad=True)
        with pytest.raises(ValueError, match="parameter groups"):
            cls([{"params": [a]}, {"params": [b]}])
        with pytest.raises(ValueError, match="learning rate"):
            cls([a], lr=-1)
        optimizer = cls([a], line_search_fn="armijo")

        def closure():
            optimizer.zero_grad()
            loss = (a * a).sum()
            loss.backward()
            return loss
        with pytest.raises(RuntimeError, match="strong_wolfe"):
            optimizer.step(closure)
