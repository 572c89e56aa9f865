"""Autograd from several threads: per-thread grad mode, concurrent backward passes."""
import sys
import threading

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import autograd, nn, optim
import mpigrad.nn.functional as F

N_THREADS = 8
STEPS = 50


def _run_threads(target, n):
    """Run target(i) on n threads started together; re-raise the first failure."""
    errors = [None] * n
    start = threading.Barrier(n)

    def run(i):
        try:
            start.wait()
            target(i)
        except BaseException as e:  # noqa: B902  (reported to the main thread below)
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so their steps interleave finely
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
            assert not t.is_alive(), "a thread did not finish"
    finally:
        sys.setswitchinterval(interval)
    for e in errors:
        if e is not None:
            raise e


def test_grad_mode_belongs_to_the_thread():
    seen = {}

    def worker():
        seen["start"] = mg.is_grad_enabled()
        with mg.no_grad():
            seen["inside"] = mg.is_grad_enabled()
            set_in_thread.set()
            main_checked.wait(timeout=60)

    set_in_thread, main_checked = threading.Event(), threading.Event()
    with mg.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        set_in_thread.wait(timeout=60)
        # The worker's no_grad is its own; this thread is still under its own no_grad.
        assert not mg.is_grad_enabled()
        main_checked.set()
        t.join()
    assert mg.is_grad_enabled()
    assert seen == {"start": True, "inside": False}  # a new thread starts with grad enabled


def test_inference_mode_matches_torch():
    torch = pytest.importorskip("torch")
    for lib in (mg, torch):
        x = lib.ones(3, requires_grad=True)
        with lib.inference_mode():
            assert not (x * 2).requires_grad and lib.is_inference_mode_enabled()
            with lib.inference_mode(False):
                assert (x * 2).requires_grad and not lib.is_inference_mode_enabled()
        with lib.no_grad():
            with lib.inference_mode(False):
                assert lib.is_grad_enabled()

        @lib.inference_mode
        def bare(t):
            return t * 2

        @lib.inference_mode()
        def called(t):
            return t * 2

        assert not bare(x).requires_grad and not called(x).requires_grad
        assert lib.is_grad_enabled() and not lib.is_inference_mode_enabled()


def _mlp(seed):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3))


def _batches(seed):
    rng = np.random.default_rng(seed)
    return [(mg.tensor(rng.standard_normal((8, 6)).astype(np.float32)),
             mg.tensor(rng.integers(0, 3, 8))) for _ in range(STEPS)]


def _train(model, batches):
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


def test_threads_training_their_own_models_match_one_thread():
    data = [_batches(100 + i) for i in range(N_THREADS)]
    expected = [_train(_mlp(i), data[i]) for i in range(N_THREADS)]
    models = [_mlp(i) for i in range(N_THREADS)]
    results = [None] * N_THREADS

    def work(i):
        results[i] = _train(models[i], data[i])

    _run_threads(work, N_THREADS)
    for (losses, params), (want_losses, want_params) in zip(results, expected):
        assert losses == want_losses
        for p, q in zip(params, want_params):
            np.testing.assert_array_equal(p, q)


def test_threads_differentiating_one_shared_model_match_one_thread():
    model = _mlp(0)
    params = list(model.parameters())
    data = [_batches(200 + i) for i in range(N_THREADS)]

    def grads_of(i):
        return [[g.numpy().copy() for g in
                 autograd.grad(F.cross_entropy(model(x), y), params)] for x, y in data[i]]

    expected = [grads_of(i) for i in range(N_THREADS)]
    results = [None] * N_THREADS

    def work(i):
        results[i] = grads_of(i)

    _run_threads(work, N_THREADS)
    assert all(p.grad is None for p in params)
    for got, want in zip(results, expected):
        for step_got, step_want in zip(got, want):
            for a, b in zip(step_got, step_want):
                np.testing.assert_array_equal(a, b)


def test_forward_on_one_thread_records_while_another_runs_backward():
    x = mg.randn(5, requires_grad=True)
    in_backward, forward_done = threading.Event(), threading.Event()
    seen = {}

    def hold_backward(grad):
        seen["backward thread records"] = mg.is_grad_enabled()
        in_backward.set()
        assert forward_done.wait(timeout=60)
        return grad

    def forward_thread():
        assert in_backward.wait(timeout=60)
        y = (x * 3).sum()
        seen["forward recorded"] = y.grad_fn is not None and y.requires_grad
        y.backward()
        forward_done.set()

    t = threading.Thread(target=forward_thread)
    t.start()
    h = x * 2
    h.register_hook(hold_backward)
    (h * h).sum().backward()
    t.join()
    assert seen == {"backward thread records": False, "forward recorded": True}
    np.testing.assert_allclose(x.grad.numpy(), 8 * x.data + 3, rtol=1e-6)


def _loss(x, w, meet=None):
    a = (x @ w).tanh()
    if meet is not None:
        a.register_hook(meet)
    return (a * a).exp().sum()


def _shared_graph():
    """A graph whose backward holds each of two threads inside it until both have entered
    (so both are running it at once)."""
    x = mg.randn(4, 3, dtype=mg.float64, requires_grad=True)
    w = mg.randn(3, 3, dtype=mg.float64, requires_grad=True)
    both_inside = threading.Barrier(2)

    def meet(grad):
        both_inside.wait(timeout=60)

    want = [g.numpy() for g in autograd.grad(_loss(x, w), (x, w))]
    return x, w, _loss(x, w, meet), want


def test_shared_graph_backward_from_two_threads_with_retain_graph():
    x, w, loss, want = _shared_graph()
    _run_threads(lambda i: loss.backward(retain_graph=True), 2)
    np.testing.assert_allclose(x.grad.numpy(), 2 * want[0], rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), 2 * want[1], rtol=1e-12)


def test_shared_graph_backward_from_two_threads_without_retain_graph_fails_clearly():
    """Each thread frees the nodes it has run, so the one behind may find them freed: it must
    say so (and how to avoid it), never compute from freed buffers."""
    outcomes = []
    for _ in range(20):
        x = mg.randn(4, 3, dtype=mg.float64, requires_grad=True)
        w = mg.randn(3, 3, dtype=mg.float64, requires_grad=True)
        want = autograd.grad(_loss(x, w), x)[0].numpy()
        loss = _loss(x, w)
        results = [None, None]

        def work(i):
            try:
                loss.backward()
                results[i] = "ok"
            except RuntimeError as e:
                assert "retain_graph=True" in str(e), e
                results[i] = "freed"

        _run_threads(work, 2)
        if results == ["ok", "ok"]:  # both passed every node before the other freed it
            np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-12)
        outcomes += results
    assert set(outcomes) <= {"ok", "freed"}
