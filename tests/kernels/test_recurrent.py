"""The LSTM and GRU steps' fused gate arithmetic: nn.LSTM and nn.GRU against torch's in
float32 and float64 (odd sizes, a projection, two layers, bidirectional), gradients included."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402

from .torch_check import TOLERANCE  # noqa: E402


MODELS = {"lstm": ("LSTM", {}), "lstm_proj": ("LSTM", {"proj_size": 3}),
          "gru": ("GRU", {}), "gru_bidirectional": ("GRU", {"bidirectional": True})}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_recurrent_layers_match_torch(model, dtype):
    name, kwargs = MODELS[model]
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(5, 7, num_layers=2, **kwargs).to(
        torch.float64 if dtype == np.float64 else torch.float32)
    ours = getattr(mg.nn, name)(5, 7, num_layers=2, **kwargs).to(
        mg.float64 if dtype == np.float64 else mg.float32)
    ours.load_state_dict({k: mg.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((6, 3, 5)).astype(dtype) * 2
    m_x, t_x = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (m_out, m_state), (t_out, t_state) = ours(m_x), theirs(t_x)
    m_last = m_state[1] if name == "LSTM" else m_state  # the cell, or the last hidden state
    t_last = t_state[1] if name == "LSTM" else t_state
    for a, b in ((m_out, t_out), (m_last, t_last)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOLERANCE[dtype])
    (m_out.sum() + m_last.sum()).backward()
    (t_out.sum() + t_last.sum()).backward()
    np.testing.assert_allclose(m_x.grad.numpy(), t_x.grad.numpy(), **TOLERANCE[dtype])
    for name, parameter in theirs.named_parameters():
        np.testing.assert_allclose(dict(ours.named_parameters())[name].grad.numpy(),
                                   parameter.grad.numpy(), **TOLERANCE[dtype], err_msg=name)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("batch_sizes", [(3, 3, 3), (4, 3, 3, 1)])
@pytest.mark.parametrize("cell", ["lstm", "lstm_proj", "gru"])
def test_fused_backward_equals_the_rules(cell, batch_sizes, reverse):
    """One layer-direction's fused backward (create_graph=False) against its differentiable
    rules (create_graph=True) in float64, on packed rows, with a gradient reaching the saved
    columns too (which only a caller's own use of them sends)."""
    from mpigrad import ops
    rng = np.random.default_rng(1)
    size, gates = 5, 3 if cell == "gru" else 4
    hidden = 3 if cell == "lstm_proj" else 5
    state = hidden if cell == "gru" else hidden + size
    shapes = [(sum(batch_sizes), gates * size), (batch_sizes[0], state), (gates * size, hidden),
              (gates * size,)] + ([(hidden, size)] if cell == "lstm_proj" else [])
    leaves = [mg.tensor(rng.standard_normal(shape), requires_grad=True) for shape in shapes]
    op = ops.gru if cell == "gru" else ops.lstm
    out = op(*leaves, batch_sizes=batch_sizes, reverse=reverse)
    g = mg.tensor(rng.standard_normal(out.shape))
    fused = mg.autograd.grad(out, leaves, g, retain_graph=True)
    rules = mg.autograd.grad(out, leaves, g, create_graph=True)
    for a, b in zip(fused, rules):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_few_row_products_run_on_one_blas_thread():
    """Under set_num_threads(2), a recurrence of a few rows holds BLAS (numpy's and scipy's,
    which the compiled loops' products call) at one thread while its steps run, and gives
    the count back after; a wide batch leaves BLAS its threads."""
    from mpigrad.kernels import threads
    from mpigrad.kernels.numpy._compiled import load_blas
    from mpigrad.kernels.numpy.recurrent import StepProduct
    load_blas()
    before = mg.get_num_threads()
    try:
        mg.set_num_threads(2)
        counts = lambda: [lib.get_num_threads() for lib in threads._blas_libraries()]  # noqa
        if not counts():
            pytest.skip("no BLAS library found by threadpoolctl")
        assert set(counts()) == {2}, counts()
        with StepProduct(np.zeros((8, 32)), 20):
            assert set(counts()) == {1}
        assert set(counts()) == {2}
        with StepProduct(np.zeros((8, 32)), 64):
            assert set(counts()) == {2}
    finally:
        mg.set_num_threads(before)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_per_step_products_cut_in_blocks_match_torch(name):
    """Few rows and a wide W_hh: each step's products (forward and backward) run in blocks,
    on one BLAS thread whatever set_num_threads says: two column blocks each summed over
    pieces of W_hh's rows (the last one shorter), in the LSTM's whole loop and the GRU's
    StepProduct alike; float64 against torch to 1e-10."""
    from mpigrad.kernels.numpy.recurrent import StepProduct
    size, batch = 160, 20
    gates = 4 if name == "LSTM" else 3
    for w in (np.zeros((size, gates * size)), np.zeros((gates * size, size))):
        product = StepProduct(w, batch)
        assert product.width < w.shape[1] and -(-w.shape[0] // product.depth) >= 2
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(7, size).double()
    ours = getattr(mg.nn, name)(7, size).to(mg.float64)
    ours.load_state_dict({k: mg.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((3, batch, 7))
    m_x, t_x = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    m_out, t_out = ours(m_x)[0], theirs(t_x)[0]
    np.testing.assert_allclose(m_out.detach().numpy(), t_out.detach().numpy(),
                               **TOLERANCE[np.float64])
    g = np.random.default_rng(1).standard_normal(x.shape[:2] + (size,))
    m_out.backward(mg.tensor(g))
    t_out.backward(torch.tensor(g))
    np.testing.assert_allclose(m_x.grad.numpy(), t_x.grad.numpy(), **TOLERANCE[np.float64])
    for pname, parameter in theirs.named_parameters():
        np.testing.assert_allclose(dict(ours.named_parameters())[pname].grad.numpy(),
                                   parameter.grad.numpy(), **TOLERANCE[np.float64],
                                   err_msg=pname)


def _ulps(values, exact):
    """|values - exact| in float32 ulps of the exact value (those of the smallest normal
    float32 where it is subnormal)."""
    tiny = np.finfo(np.float32).tiny
    ulp = np.spacing(np.maximum(np.abs(exact), tiny).astype(np.float32)).astype(np.float64)
    return np.abs(values.astype(np.float64) - exact) / ulp


def test_float32_gates_keep_torchs_float32_accuracy():
    """The float32 LSTM step computes its sigmoids and tanhs in float32 arithmetic. Over
    [-12, 12) in windows of width 1/2, each gate's largest error against float64 is at most
    torch.sigmoid's / torch.tanh's own there, or 2 float32 ulps; tanh keeps its relative
    precision near 0 (where 1 - 2 / (e^2u + 1) cancels) and the sign of a zero, and +-inf
    saturate."""
    from mpigrad.kernels.numpy.recurrent import lstm_step
    windows, size = 48, 200
    sweep = np.linspace(-12, 12, windows * 1000, endpoint=False).astype(np.float32)
    small = np.float32(10) ** np.linspace(-30, -1, 797, dtype=np.float32)
    sweep = np.concatenate([sweep, small, [0.0, np.inf, -np.inf]]).astype(np.float32)
    sweep = np.concatenate([sweep, -sweep[windows * 1000:]])
    pre = sweep.reshape(-1, size)  # rows of the step
    rows = pre.shape[0]
    zeros = np.zeros((rows, 4 * size), np.float32)
    out = np.empty((rows, 6 * size), np.float32)
    # Every gate's pre-activation is the sweep; the previous cell is 0 (c = i g).
    lstm_step(np.tile(pre, 4), zeros, np.zeros(4 * size, np.float32),
              np.zeros((rows, 2 * size), np.float32), out)
    exact = torch.tensor(sweep, dtype=torch.float64)
    for columns, function in ((slice(2 * size, 3 * size), torch.sigmoid),
                              (slice(4 * size, 5 * size), torch.tanh)):
        ours = out[:, columns].reshape(-1)
        reference = function(exact).numpy()
        theirs = function(torch.tensor(sweep)).numpy()
        ours_worst = _ulps(ours, reference)[:windows * 1000].reshape(windows, -1).max(1)
        torch_worst = _ulps(theirs, reference)[:windows * 1000].reshape(windows, -1).max(1)
        assert not (ours_worst > np.maximum(torch_worst, 2)).any(), (ours_worst, torch_worst)
        assert (_ulps(ours, reference)[windows * 1000:] <= 2).all()  # small |u|, +-inf
    # tanh of the cell: i = 0, f = 1 and o = 1 (pre-activations -100, 100, 100), so
    # h = tanh(c_prev), c_prev being the sweep.
    gates = np.concatenate([np.full((rows, size), value, np.float32)
                            for value in (-100, 100, 0, 100)], 1)
    lstm_step(gates, zeros, np.zeros(4 * size, np.float32),
              np.concatenate([np.zeros((rows, size), np.float32), pre], 1), out)
    assert (_ulps(out[:, :size].reshape(-1), torch.tanh(exact).numpy()) <= 2).all()
    # The sign of a zero (the gates' sums above turn -0 into +0, as torch's do): tanh's own.
    from mpigrad.kernels.compiled.recurrent import _tanh_into
    signed = np.empty_like(sweep)
    _tanh_into(signed, sweep, False)
    np.testing.assert_array_equal(np.signbit(signed), np.signbit(torch.tanh(torch.tensor(sweep))))
