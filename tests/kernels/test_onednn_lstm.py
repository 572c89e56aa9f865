"""nn.LSTM's float32 layers on oneDNN's LSTM primitive (mpigrad/kernels/onednn/rnn.py, the op
ops.lstm_layer) against torch's float32 LSTM, which runs the same primitive: outputs, final
states and every gradient, for every option that keeps a padded batch. What oneDNN does not
take (packed sequences of different lengths, projections, float64, the flag off) runs as
linear and `lstm`, and so do the rules: second order and tangents after a oneDNN forward
give what the composition gives."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import forward_ad as fwAD  # noqa: E402
from mpigrad.kernels.onednn import rnn as onednn_rnn  # noqa: E402

from .test_onednn import needs_onednn  # noqa: E402

# torch's own float32 tolerance for a float32 result of these sizes
TOL = dict(rtol=1e-4, atol=1e-5)
I, H, B, T = 5, 6, 3, 7


@pytest.fixture
def lstm_calls(monkeypatch):
    """"forward" and "backward" for each layer oneDNN ran while the test ran."""
    calls = []
    for name in ("lstm_forward", "lstm_backward"):
        def counted(*args, _run=getattr(onednn_rnn, name), _name=name, **kwargs):
            calls.append(_name.split("_")[1])
            return _run(*args, **kwargs)
        monkeypatch.setattr(onednn_rnn, name, counted)
    return calls


def _pair(**options):
    theirs = torch.nn.LSTM(I, H, **options)
    ours = mg.nn.LSTM(I, H, dtype=mg.float32, **options)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _run(module, lib, x, states, seeds):
    """Output, final states and the gradients of x, the states and every parameter, from a
    backward with the given seeds on all three outputs."""
    leaves = [lib.tensor(a, requires_grad=True) for a in [x, *states]]
    out, (h, c) = module(leaves[0], tuple(leaves[1:]) if states else None)
    sum((t * lib.tensor(s)).sum() for t, s in zip((out, h, c), seeds)).backward()
    grads = [leaf.grad.numpy() for leaf in leaves]
    grads += [p.grad.numpy() for _, p in sorted(module.named_parameters())]
    module.zero_grad()
    return [t.detach().numpy() for t in (out, h, c)] + grads


OPTIONS = [{}, {"num_layers": 2}, {"bidirectional": True}, {"batch_first": True},
           {"bias": False}, {"num_layers": 2, "bidirectional": True, "batch_first": True}]


@needs_onednn
@pytest.mark.parametrize("with_states", [False, True])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_lstm_on_onednn_matches_torch(options, with_states, lstm_calls):
    rng = np.random.default_rng(0)
    ours, theirs = _pair(**options)
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    shape = (B, T, I) if options.get("batch_first") else (T, B, I)
    x = rng.standard_normal(shape).astype(np.float32)
    states = ([rng.standard_normal((layers, B, H)).astype(np.float32) for _ in range(2)]
              if with_states else [])
    out_shape = shape[:2] + (H * (2 if options.get("bidirectional") else 1),)
    seeds = [rng.standard_normal(s).astype(np.float32) for s in (out_shape, (layers, B, H),
                                                                 (layers, B, H))]
    for a, b in zip(_run(ours, mg, x, states, seeds), _run(theirs, torch, x, states, seeds)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, **TOL)
    assert lstm_calls.count("forward") == lstm_calls.count("backward") == layers


def _packed(lib, x, lengths):
    return lib.nn.utils.rnn.pack_padded_sequence(lib.tensor(x), lengths, enforce_sorted=False)


@needs_onednn
def test_packed_sequences_of_different_lengths_run_as_the_composition(lstm_calls):
    rng = np.random.default_rng(1)
    ours, theirs = _pair(bidirectional=True)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    lengths = [4, T, 2]
    out, (h, c) = ours(_packed(mg, x, lengths))
    expected, (th, tc) = theirs(_packed(torch, x, lengths))
    for a, b in ((out.data, expected.data), (h, th), (c, tc)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOL)
    assert lstm_calls == []
    ours(mg.tensor(x))  # the same layers on a padded batch: oneDNN's
    assert lstm_calls == ["forward", "forward"]


@needs_onednn
def test_projection_float64_and_the_flag_off_run_as_the_composition(lstm_calls):
    x = np.random.default_rng(2).standard_normal((T, B, I))
    mg.nn.LSTM(I, H, proj_size=2, dtype=mg.float32)(mg.tensor(x.astype(np.float32)))
    mg.nn.LSTM(I, H, dtype=mg.float64)(mg.tensor(x))
    with mg.backends.mkldnn.flags(enabled=False):
        mg.nn.LSTM(I, H, dtype=mg.float32)(mg.tensor(x.astype(np.float32)))
    assert lstm_calls == []


def _gradient_penalty(module, x):
    """d/dθ of |d out.sum() / dx|^2: the input's gradient with create_graph, then backward."""
    leaf = mg.tensor(x, requires_grad=True)
    out, _ = module(leaf)
    (grad,) = mg.autograd.grad((out * out).sum(), leaf, create_graph=True)
    (grad * grad).sum().backward()
    grads = [grad.detach().numpy()] + [p.grad.numpy() for _, p in sorted(module.named_parameters())]
    module.zero_grad()
    return grads


@needs_onednn
def test_second_order_after_a_onednn_forward_is_the_compositions(lstm_calls):
    rng = np.random.default_rng(3)
    module = mg.nn.LSTM(I, H, num_layers=2, dtype=mg.float32)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    on_onednn = _gradient_penalty(module, x)
    # The forward ran on oneDNN, the gradient with a graph on the rules (oneDNN's backward
    # gives no graph, and the parameters' second-order gradients would be missing); the
    # backward of that gradient goes through the layers again, on oneDNN.
    assert lstm_calls == ["forward", "forward", "backward", "backward"]
    with mg.backends.mkldnn.flags(enabled=False):
        composed = _gradient_penalty(module, x)
    for a, b in zip(on_onednn, composed):
        np.testing.assert_allclose(a, b, **TOL)


@needs_onednn
def test_tangents_through_a_padded_float32_layer_are_the_compositions(lstm_calls):
    rng = np.random.default_rng(4)
    module = mg.nn.LSTM(I, H, dtype=mg.float32)
    x, t = (rng.standard_normal((T, B, I)).astype(np.float32) for _ in range(2))

    def tangent():
        with fwAD.dual_level():
            out, (h, c) = module(fwAD.make_dual(mg.tensor(x), mg.tensor(t)))
            return [fwAD.unpack_dual(o).tangent.detach().numpy() for o in (out, h, c)]
    on_onednn = tangent()
    assert lstm_calls == ["forward"]
    with mg.backends.mkldnn.flags(enabled=False):
        composed = tangent()
    for a, b in zip(on_onednn, composed):
        np.testing.assert_allclose(a, b, **TOL)


@needs_onednn
def test_without_a_graph_to_record_the_inference_forward_runs(monkeypatch):
    """As torch's LSTM: the training forward (with its workspace) only when a graph will be
    recorded, so under no_grad, or with nothing requiring grad, the inference one."""
    trainings = []

    def spy(*args, training=True, _forward=onednn_rnn.lstm_forward, **kwargs):
        trainings.append(training)
        return _forward(*args, training=training, **kwargs)
    monkeypatch.setattr(onednn_rnn, "lstm_forward", spy)
    ours, theirs = _pair(num_layers=2)
    x = np.random.default_rng(6).standard_normal((T, B, I)).astype(np.float32)
    with mg.no_grad():
        out, (h, c) = ours(mg.tensor(x))
    with torch.no_grad():
        expected, (th, tc) = theirs(torch.tensor(x))
    for a, b in ((out, expected), (h, th), (c, tc)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **TOL)
    ours.requires_grad_(False)
    ours(mg.tensor(x))
    ours.requires_grad_(True)
    ours(mg.tensor(x))
    assert trainings == [False, False, False, False, True, True]


@needs_onednn
def test_an_inference_forward_that_a_graph_recorded_still_has_gradients():
    # ops.lstm_layer(train=False) called on inputs that require grad: its backward, with no
    # workspace to read, runs the composition's
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in
              ((T * B, I), (B, 2 * H), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
    seed = mg.tensor(rng.standard_normal(((T + 1) * B, H)).astype(np.float32))

    def gradients(train):
        leaves = [mg.tensor(a, requires_grad=True) for a in arrays]
        out = mg.ops.lstm_layer(*leaves, batch_sizes=(B,) * T, reverse=False, train=train)
        (out * seed).sum().backward()
        return [out.detach().numpy()] + [leaf.grad.numpy() for leaf in leaves]
    for a, b in zip(gradients(False), gradients(True)):
        np.testing.assert_allclose(a, b, **TOL)


@needs_onednn
def test_the_same_bits_from_run_to_run():
    rng = np.random.default_rng(5)
    module = mg.nn.LSTM(I, H, num_layers=2, dtype=mg.float32)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    seeds = [rng.standard_normal(s).astype(np.float32) for s in ((T, B, H), (2, B, H),
                                                                 (2, B, H))]
    first, second = (_run(module, mg, x, [], seeds) for _ in range(2))
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
