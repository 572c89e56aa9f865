"""Activation checkpointing, both schemes, against plain backward and torch.utils.checkpoint."""
import tracemalloc
import warnings

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import autograd, nn
import mpigrad.nn.functional as F
import mpigrad.utils.checkpoint as checkpoint_module
from mpigrad.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential

BOTH = pytest.mark.parametrize("use_reentrant", [False, True])


def _weights(seed=0, sizes=(5, 8, 8, 3)):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((o, i)) / np.sqrt(i), 0.1 * rng.standard_normal(o))
            for i, o in zip(sizes[:-1], sizes[1:])]


class Net:
    """The same tanh MLP in mpigrad or torch, float64; `segment(h)` is the checkpointed part."""

    def __init__(self, lib, seed=0):
        self.lib = lib
        self.params = [lib.tensor(a, requires_grad=True)
                       for pair in _weights(seed) for a in pair]

    def layer(self, h, k):
        w, b = self.params[2 * k], self.params[2 * k + 1]
        return (h @ w.T + b).tanh()

    def segment(self, h):
        return self.layer(self.layer(h, 0), 1)

    def forward(self, x, use_reentrant=None):
        if use_reentrant is None:
            h = self.segment(x)
        else:
            h = _checkpoint_of(self.lib)(self.segment, x, use_reentrant=use_reentrant)
        return self.layer(h, 2)

    def grads(self):
        return [None if p.grad is None else p.grad.detach().numpy().copy() for p in self.params]


def _checkpoint_of(lib):
    if lib is mg:
        return checkpoint
    import torch.utils.checkpoint
    return torch.utils.checkpoint.checkpoint


def _libs():
    torch = pytest.importorskip("torch")
    return (mg, torch)


def _input(lib, requires_grad, seed=1):
    return lib.tensor(np.random.default_rng(seed).standard_normal((6, 5)),
                      requires_grad=requires_grad)


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
        else:
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)


@BOTH
def test_inputs_not_requiring_grad(use_reentrant):
    results = {}
    for lib in _libs():
        net = Net(lib)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            net.forward(_input(lib, False), use_reentrant).sum().backward()
        warned = any("None of the inputs have requires_grad=True" in str(w.message)
                     for w in caught)
        results[lib.__name__] = (net.grads(), warned)
    (mg_grads, mg_warned), (torch_grads, torch_warned) = results["mpigrad"], results["torch"]
    _assert_same(mg_grads, torch_grads)
    assert mg_warned == torch_warned == use_reentrant
    plain = Net(mg)
    plain.forward(_input(mg, False)).sum().backward()
    if use_reentrant:  # the segment's parameters are lost, as in torch
        assert mg_grads[:4] == [None] * 4
        _assert_same(mg_grads[4:], plain.grads()[4:])
    else:
        _assert_same(mg_grads, plain.grads())


@BOTH
def test_autograd_grad(use_reentrant):
    plain = Net(mg)
    x = _input(mg, True)
    want = autograd.grad(plain.forward(x).sum(), [x] + plain.params)
    for lib in _libs():
        net = Net(lib)
        x = _input(lib, True)
        loss = net.forward(x, use_reentrant).sum()
        if use_reentrant:
            with pytest.raises(RuntimeError, match=r"incompatible with \.grad\(\)"):
                lib.autograd.grad(loss, [x] + net.params)
            continue
        got = lib.autograd.grad(loss, [x] + net.params)
        _assert_same([g.detach().numpy() for g in got], [g.numpy() for g in want])
        assert net.grads() == [None] * len(net.params)  # no side effect on .grad


def test_backward_with_inputs_is_refused_by_the_reentrant_scheme_only():
    net = Net(mg)
    x = _input(mg, True)
    net.forward(x, use_reentrant=False).sum().backward(inputs=[x])
    assert net.grads() == [None] * len(net.params) and x.grad is not None
    with pytest.raises(RuntimeError, match=r"incompatible with \.grad\(\)"):
        net.forward(x, use_reentrant=True).sum().backward(inputs=[x])


def test_create_graph_double_backward_matches_torch_and_plain():
    results = []
    for lib, mode in ((mg, None), (mg, False), (_libs()[1], False)):
        net = Net(lib)
        x = _input(lib, True)
        loss = (net.forward(x, mode) ** 2).sum()
        gx, gw = lib.autograd.grad(loss, [x, net.params[0]], create_graph=True)
        ((gx ** 2).sum() + (gw * gw).sum()).backward()
        results.append([x.grad.detach().numpy()] + net.grads())
    _assert_same(results[0], results[1])
    _assert_same(results[1], results[2])


class DropoutNet(Net):
    def segment(self, h):
        h = self.layer(h, 0)
        return self.layer(F.dropout(h, 0.5) if self.lib is mg else
                          self.lib.nn.functional.dropout(h, 0.5), 1)


@BOTH
@pytest.mark.parametrize("lib_name", ["mpigrad", "torch"])
def test_dropout_inside_the_segment_replays_its_mask(use_reentrant, lib_name):
    lib = mg if lib_name == "mpigrad" else _libs()[1]

    def run(mode, preserve=True):
        lib.manual_seed(7)
        net = DropoutNet(lib)
        x = _input(lib, True)
        if mode is None:
            h = net.segment(x)
        else:
            h = _checkpoint_of(lib)(net.segment, x, use_reentrant=mode,
                                    preserve_rng_state=preserve)
        lib.rand(3)  # the stream moves on before backward, as in training
        net.layer(h, 2).sum().backward()
        return [x.grad.numpy().copy()] + net.grads()

    plain = run(None)
    _assert_same(run(use_reentrant), plain)
    changed = run(use_reentrant, preserve=False)
    assert not np.allclose(changed[0], plain[0])  # the flag matters: a fresh mask is drawn


def _with_kwargs(x, w, scale=1.0, tag="none"):
    return (x @ w * scale).tanh(), tag, 3


def test_kwargs_and_non_tensor_outputs():
    results = []
    for lib in _libs():
        x = _input(lib, True)
        w = lib.tensor(np.random.default_rng(4).standard_normal((5, 2)), requires_grad=True)
        out, tag, n = _checkpoint_of(lib)(_with_kwargs, x, w, use_reentrant=False, scale=0.5,
                                          tag="seg")
        assert (tag, n) == ("seg", 3)
        out.sum().backward()
        results.append([x.grad.numpy(), w.grad.numpy()])
        with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
            _checkpoint_of(lib)(_with_kwargs, x, w, use_reentrant=True, scale=0.5)
    _assert_same(*results)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_sequential_matches_torch(use_reentrant):
    results = []
    for lib in _libs():
        lib.manual_seed(0)
        layers = [lib.nn.Linear(6, 6) for _ in range(5)]
        for k, layer in enumerate(layers):
            w, b = _weights(k, (6, 6))[0]
            layer.weight = lib.nn.Parameter(lib.tensor(w))
            layer.bias = lib.nn.Parameter(lib.tensor(b))
        model = lib.nn.Sequential(*[m for layer in layers for m in (layer, lib.nn.Tanh())])
        x = lib.tensor(np.random.default_rng(5).standard_normal((4, 6)), requires_grad=True)
        seq = (checkpoint_sequential if lib is mg
               else __import__("torch").utils.checkpoint.checkpoint_sequential)
        seq(model, 3, x, use_reentrant=use_reentrant).sum().backward()
        results.append([x.grad.numpy()] + [p.grad.detach().numpy() for p in model.parameters()])
    _assert_same(*results)


def test_a_second_backward_with_retain_graph_recomputes_again():
    net = Net(mg)
    x = _input(mg, True)
    loss = net.forward(x, use_reentrant=False).sum()
    loss.backward(retain_graph=True)
    first = net.grads()
    loss.backward()
    _assert_same(net.grads(), [2 * g for g in first])


def test_an_input_changed_in_place_after_forward_is_an_error():
    net = Net(mg)
    x = _input(mg, False)
    loss = net.forward(x, use_reentrant=False).sum()
    x.add_(1)
    with pytest.raises(CheckpointError, match="modified in place"):
        loss.backward()


def test_a_function_that_runs_differently_the_second_time_is_an_error():
    x = _input(mg, True)
    calls = []

    def moody(h):
        calls.append(1)
        return h.exp() if len(calls) == 1 else h[:2].exp()

    loss = checkpoint(moody, x).sum()
    with pytest.raises(CheckpointError, match="must do the same operations"):
        loss.backward()


def _mlp(depth, width, seed):
    rng = np.random.default_rng(seed)
    return [(mg.tensor(rng.standard_normal((width, width)) / np.sqrt(width), requires_grad=True),
             mg.tensor(np.zeros(width), requires_grad=True)) for _ in range(depth)]


def _block(h, layers):
    for w, b in layers:
        h = mg.ops.linear(h, w, b).tanh()
    return h


def _run(layers, x, segments, use_reentrant):
    """Forward+backward; returns (peak bytes above what the step starts with, gradients)."""
    for w, b in layers:
        w.grad = b.grad = None
    tracemalloc.start()
    if segments:
        per = len(layers) // segments
        h = x
        for s in range(segments):
            h = checkpoint(_block, h, layers[s * per:(s + 1) * per], use_reentrant=use_reentrant)
    else:
        h = _block(x, layers)
    h.sum().backward()
    del h
    grads = [t.grad.numpy() for layer in layers for t in layer]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, grads


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointing_lowers_peak_memory_and_keeps_gradients(use_reentrant):
    layers = _mlp(depth=16, width=128, seed=0)
    x = mg.tensor(np.random.default_rng(1).standard_normal((2048, 128)), requires_grad=True)
    plain_peak, plain_grads = _run(layers, x, 0, use_reentrant)
    x.grad = None
    ckpt_peak, ckpt_grads = _run(layers, x, 4, use_reentrant)
    for a, b in zip(plain_grads, ckpt_grads):
        np.testing.assert_array_equal(a, b)
    # 16 saved 2048x128 float64 activations (2 MiB each) against three segment inputs plus
    # one segment recomputed at a time.
    assert ckpt_peak < 0.7 * plain_peak, (plain_peak, ckpt_peak)


def test_parameters_in_a_module_get_gradients_through_nn_layers():
    mg.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = _input(mg, False).to(mg.float32)
    plain = autograd.grad(model(x).sum(), list(model.parameters()))
    checkpoint_sequential(model, 2, x).sum().backward()
    for p, g in zip(model.parameters(), plain):
        np.testing.assert_array_equal(p.grad.numpy(), g.numpy())


def test_nested_checkpoints_match_torch():
    results = []
    for lib in _libs():
        x = _input(lib, True)
        w = lib.tensor(np.random.default_rng(6).standard_normal((5, 5)), requires_grad=True)
        ck = _checkpoint_of(lib)

        def inner(h):
            return (h @ w).tanh()

        def outer(h):
            return ck(inner, (h @ w).tanh(), use_reentrant=False).exp()

        ck(outer, x, use_reentrant=False).sum().backward()
        results.append([x.grad.numpy(), w.grad.numpy()])
    _assert_same(*results)


@pytest.mark.parametrize("failure", ["an earlier callback raises", "the pass raises"])
def test_recomputed_activations_are_dropped_however_the_backward_ends(monkeypatch, failure):
    segments = []

    class Recorded(checkpoint_module._Segment):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            segments.append(self)

    monkeypatch.setattr(checkpoint_module, "_Segment", Recorded)
    x = mg.randn(4, 3, requires_grad=True)
    y = checkpoint(lambda t: t.tanh() * t, x, use_reentrant=False)

    def fail(*args):
        raise ValueError("injected")

    if failure == "an earlier callback raises":  # queued before the segment's cleanup
        y.register_hook(lambda grad: autograd.queue_callback(fail))
    else:  # x's hook runs after the segment was recomputed
        x.register_hook(fail)
    with pytest.raises(ValueError, match="injected"):
        y.sum().backward()
    assert len(segments) == 1 and segments[0].recomputed == {}
