"""RNN, LSTM, GRU and their cells against torch in float64: a torch state dict loads unchanged
and gives torch's outputs, final states, and gradients of the input, the initial states and
every parameter (1e-10), for every option; packed sequences of uneven lengths, sorted or not;
torch.nn.utils.rnn's padding and packing; torch's errors for bad input."""
import warnings

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.autograd import gradcheck, gradgradcheck
from mpigrad.autograd.graph import reachable
from mpigrad.nn.utils import rnn as ours_rnn

torch = pytest.importorskip("torch")
from torch.nn.utils import rnn as torch_rnn  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)
I, H, P, B, T = 3, 4, 2, 3, 5


def _pair(name, *args, **options):
    """The module `name` of both libraries, built alike, with torch's weights loaded in ours."""
    theirs = getattr(torch.nn, name)(*args, **options).double()
    ours = getattr(mg.nn, name)(*args, **options)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert list(ours.state_dict()) == list(theirs.state_dict())
    return ours, theirs


def _leaves(arrays, lib):
    return [None if a is None else lib.tensor(a, requires_grad=True) for a in arrays]


def _flat(out):
    """Every tensor in a module's output, in order (a PackedSequence counts by its data)."""
    if isinstance(out, (tuple, list)) and not hasattr(out, "batch_sizes"):
        return [t for o in out for t in _flat(o)]
    return [out.data if hasattr(out, "batch_sizes") else out]


def _check_grads(ours, theirs, leaves, rng):
    """Backward from every output with the same random seeds; input and parameter grads."""
    outs, expected = ours[0], theirs[0]
    assert len(outs) == len(expected)
    for a, b in zip(outs, expected):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOL)
    seeds = [rng.standard_normal(tuple(b.shape)) for b in expected]
    sum((a * mg.tensor(s)).sum() for a, s in zip(outs, seeds)).backward()
    sum((b * torch.tensor(s)).sum() for b, s in zip(expected, seeds)).backward()
    for a, b in leaves:
        if a is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **TOL)


def _compare(ours, theirs, x, hx, rng):
    """Both modules on input x and initial states hx (arrays; a list of two for the LSTM, or
    None); compares outputs, final states and all gradients."""
    xs = _leaves([x], mg) + _leaves([x], torch)
    states = [] if hx is None else [_leaves(hx, mg), _leaves(hx, torch)]
    def call(module, lib, i):
        if hx is None:
            return module(xs[i])
        h = states[i]
        return module(xs[i], tuple(h) if len(h) == 2 else h[0])
    out = _flat(call(ours, mg, 0))
    expected = _flat(call(theirs, torch, 1))
    leaves = [(xs[0], xs[1])] + ([] if hx is None else list(zip(states[0], states[1])))
    _check_grads((out,), (expected,), leaves, rng)
    theirs_named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), theirs_named[name].grad.numpy(), **TOL,
                                   err_msg=name)


MODES = [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("GRU", {}), ("LSTM", {}),
         ("LSTM", {"proj_size": P})]
OPTIONS = [{}, {"num_layers": 2}, {"bidirectional": True}, {"batch_first": True},
           {"bias": False},
           {"num_layers": 2, "bidirectional": True, "batch_first": True, "dropout": 0.5}]


def _ids(pair):
    return ",".join(f"{k}={v}" for k, v in pair.items()) or "default"


def _states(name, options, rng, batch=(B,)):
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    h = rng.standard_normal((layers, *batch, options.get("proj_size") or H))
    return [h, rng.standard_normal((layers, *batch, H))] if name == "LSTM" else [h]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m[0] + ("," + _ids(m[1]) if m[1] else ""))
@pytest.mark.parametrize("options", OPTIONS, ids=_ids)
def test_module(rng, mode, options):
    name, mode_options = mode
    ours, theirs = _pair(name, I, H, **mode_options, **options)
    # dropout applies only while training; in eval mode both are deterministic and equal
    ours.eval()
    theirs.eval()
    shape = (B, T, I) if options.get("batch_first") else (T, B, I)
    _compare(ours, theirs, rng.standard_normal(shape), None, rng)
    _compare(ours, theirs, rng.standard_normal(shape),
             _states(name, {**mode_options, **options}, rng), rng)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m[0] + ("," + _ids(m[1]) if m[1] else ""))
@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched(rng, mode, batch_first):
    name, options = mode
    ours, theirs = _pair(name, I, H, bidirectional=True, batch_first=batch_first, **options)
    _compare(ours, theirs, rng.standard_normal((T, I)), None, rng)
    _compare(ours, theirs, rng.standard_normal((T, I)),
             _states(name, {**options, "bidirectional": True}, rng, batch=()), rng)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m[0] + ("," + _ids(m[1]) if m[1] else ""))
def test_float32_stays_float32(rng, mode):
    """A float32 module keeps outputs and gradients in float32 (close to torch's)."""
    name, options = mode
    theirs = getattr(torch.nn, name)(I, H, bidirectional=True, **options)
    ours = getattr(mg.nn, name)(I, H, bidirectional=True, dtype=mg.float32, **options)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    a, b = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, expected = ours(a)[0], theirs(b)[0]
    out.sum().backward()
    expected.sum().backward()
    assert out.dtype == a.grad.dtype == ours.weight_hh_l0.grad.dtype == mg.float32
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-5)


def test_dropout_between_layers_in_training(rng):
    """With p=1 dropout is deterministic: the second layer sees zeros in both libraries, so
    this shows it sits between layers (and not after the last)."""
    for name in ("LSTM", "GRU", "RNN"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that p=1 zeroes everything
            ours, theirs = _pair(name, I, H, num_layers=2, dropout=1.0)
        _compare(ours, theirs, rng.standard_normal((T, B, I)), None, rng)


def test_dropout_with_one_layer_warns_as_torch_and_changes_nothing(rng):
    for lib in (mg, torch):
        with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
            lib.nn.LSTM(I, H, dropout=0.3)
    with pytest.warns(UserWarning):
        ours, theirs = _pair("GRU", I, H, dropout=0.5)
    _compare(ours, theirs, rng.standard_normal((T, B, I)), None, rng)  # both in training mode


def test_dropout_in_training_zeroes_the_second_layers_input(rng):
    """p=0.5 in training: outputs differ from eval mode's, and from one call to the next."""
    module = mg.nn.LSTM(I, H, num_layers=2, dropout=0.5)
    x = mg.tensor(rng.standard_normal((T, B, I)))
    first, second = module(x)[0].detach().numpy(), module(x)[0].detach().numpy()
    module.eval()
    clean = module(x)[0].detach().numpy()
    assert not np.allclose(first, clean) and not np.allclose(first, second)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m[0] + ("," + _ids(m[1]) if m[1] else ""))
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_packed_sequences(rng, mode, enforce_sorted, batch_first):
    """Uneven lengths through pack_padded_sequence, a 2-layer bidirectional module and
    pad_packed_sequence; h_n is each sequence's state at its own last step, in the original
    batch order."""
    name, options = mode
    ours, theirs = _pair(name, I, H, num_layers=2, bidirectional=True, batch_first=batch_first,
                         **options)
    lengths = [5, 4, 2, 1] if enforce_sorted else [2, 5, 1, 4]
    batch = len(lengths)
    padded = rng.standard_normal((batch, T, I) if batch_first else (T, batch, I))
    hx = _states(name, {**options, "num_layers": 2, "bidirectional": True}, rng,
                 batch=(batch,))
    for states in (None, hx):
        xs = _leaves([padded], mg) + _leaves([padded], torch)
        hs = [_leaves(states or [], mg), _leaves(states or [], torch)]
        results = []
        for i, (lib, utils, module) in enumerate([(mg, ours_rnn, ours),
                                                 (torch, torch_rnn, theirs)]):
            packed = utils.pack_padded_sequence(xs[i], lengths, batch_first=batch_first,
                                                enforce_sorted=enforce_sorted)
            h = hs[i]
            out, final = module(packed, None if not h else tuple(h) if len(h) == 2 else h[0])
            unpacked, out_lengths = utils.pad_packed_sequence(out, batch_first=batch_first,
                                                              total_length=T + 1)
            results.append((packed, out, [unpacked] + _flat(final), out_lengths))
        (p_ours, o_ours, r_ours, l_ours), (p_theirs, o_theirs, r_theirs, l_theirs) = results
        for field in ("batch_sizes", "sorted_indices", "unsorted_indices"):
            a, b = getattr(o_ours, field), getattr(o_theirs, field)
            assert (a is None) == (b is None), field
            if a is not None:
                np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=field)
        np.testing.assert_array_equal(l_ours.numpy(), l_theirs.numpy())
        np.testing.assert_allclose(o_ours.data.detach().numpy(), o_theirs.data.detach().numpy(),
                                   **TOL)
        _check_grads((r_ours,), (r_theirs,),
                     [(xs[0], xs[1])] + list(zip(hs[0], hs[1])), rng)
        theirs_named = dict(theirs.named_parameters())
        for pname, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), theirs_named[pname].grad.numpy(), **TOL,
                                       err_msg=pname)
            p.grad = None
        theirs.zero_grad()


# ----------------------------------------------------------------------------- cells
CELLS = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("GRUCell", {}),
         ("LSTMCell", {}), ("LSTMCell", {"bias": False}), ("GRUCell", {"bias": False})]


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c[0] + ("," + _ids(c[1]) if c[1] else ""))
@pytest.mark.parametrize("batched", [True, False])
def test_cell(rng, cell, batched):
    name, options = cell
    ours, theirs = _pair(name, I, H, **options)
    batch = (B,) if batched else ()
    x = rng.standard_normal((*batch, I))
    _compare(ours, theirs, x, None, rng)
    states = [rng.standard_normal((*batch, H)) for _ in range(2 if name == "LSTMCell" else 1)]
    _compare(ours, theirs, x, states, rng)


def test_cells_over_a_sequence_equal_the_layer(rng):
    """An LSTMCell stepped by hand over a sequence gives nn.LSTM's outputs."""
    cell = mg.nn.LSTMCell(I, H)
    layer = mg.nn.LSTM(I, H)
    layer.load_state_dict({k + "_l0": v for k, v in cell.state_dict().items()})
    x = mg.tensor(rng.standard_normal((T, B, I)))
    h = c = mg.zeros(B, H)
    outs = []
    for t in range(T):
        h, c = cell(x[t], (h, c))
        outs.append(h)
    out, (h_n, c_n) = layer(x)
    np.testing.assert_allclose(mg.stack(outs).detach().numpy(), out.detach().numpy(), **TOL)
    np.testing.assert_allclose(c.detach().numpy(), c_n[0].detach().numpy(), **TOL)


# ----------------------------------------------------------------------------- the graph
def _op_nodes(out):
    nodes = reachable([t.grad_fn for t in _flat(out) if t.grad_fn is not None])
    return len([n for n in nodes if n.name() != "AccumulateGrad"])


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_graph_nodes_do_not_grow_with_the_sequence(rng, name):
    """Graph nodes per time step: 0. A layer-direction is the input projection (one matmul
    over all steps) and one recurrence node, plus a few slices and joins, whatever the
    sequence's length: a 2-layer bidirectional LSTM's graph has 30 nodes besides its 17
    leaves for 5 steps as for 60 (GRU and RNN: 17)."""
    module = getattr(mg.nn, name)(I, H, num_layers=2, bidirectional=True)
    short = _op_nodes(module(mg.tensor(rng.standard_normal((5, B, I)), requires_grad=True)))
    long = _op_nodes(module(mg.tensor(rng.standard_normal((60, B, I)), requires_grad=True)))
    assert short == long <= 8 * 4  # at most 8 per layer-direction


def test_gradcheck_through_a_packed_bidirectional_lstm(rng):
    """Gradients, second derivatives and forward-mode tangents of the whole module."""
    module = mg.nn.LSTM(2, 3, num_layers=2, bidirectional=True, proj_size=1)
    def f(x, h0, c0):
        packed = ours_rnn.pack_padded_sequence(x, [3, 1, 2], enforce_sorted=False)
        out, (h, c) = module(packed, (h0, c0))
        return ours_rnn.pad_packed_sequence(out)[0].sum(-1) + h.sum() + c.sum(0).sum(-1)
    inputs = (mg.tensor(rng.standard_normal((3, 3, 2)), requires_grad=True),
              mg.tensor(rng.standard_normal((4, 3, 1)), requires_grad=True),
              mg.tensor(rng.standard_normal((4, 3, 3)), requires_grad=True))
    assert gradcheck(f, inputs, check_forward_ad=True)
    assert gradgradcheck(f, inputs)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m[0] + ("," + _ids(m[1]) if m[1] else ""))
def test_tangents_equal_torch_func_jvp(rng, mode):
    """Forward mode through a 2-layer bidirectional module: the output's tangent along
    tangents of the input and the initial states equals torch.func.jvp's."""
    name, options = mode
    ours, theirs = _pair(name, I, H, num_layers=2, bidirectional=True, **options)
    primals = [rng.standard_normal((T, B, I))] + _states(
        name, {**options, "num_layers": 2, "bidirectional": True}, rng)
    tangents = [rng.standard_normal(p.shape) for p in primals]

    def output(module):
        return lambda x, *hx: module(x, tuple(hx) if len(hx) == 2 else hx[0])[0]
    out, jvp = mg.func.jvp(output(ours), tuple(mg.tensor(p) for p in primals),
                           tuple(mg.tensor(t) for t in tangents))
    expected, expected_jvp = torch.func.jvp(output(theirs),
                                            tuple(torch.tensor(p) for p in primals),
                                            tuple(torch.tensor(t) for t in tangents))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), **TOL)
    np.testing.assert_allclose(jvp.detach().numpy(), expected_jvp.detach().numpy(), **TOL)


# ----------------------------------------------------------------------------- the module's API
def test_parameters_layout_and_repr():
    for kwargs in [{}, {"num_layers": 2, "bidirectional": True, "proj_size": 2, "bias": False,
                        "batch_first": True, "dropout": 0.25}]:
        ours, theirs = _pair("LSTM", I, H, **kwargs)
        assert repr(ours) == repr(theirs)
        assert ours._flat_weights_names == theirs._flat_weights_names
        assert [[tuple(w.shape) for w in ws] for ws in ours.all_weights] == \
            [[tuple(w.shape) for w in ws] for ws in theirs.all_weights]
        assert ours.flatten_parameters() is None
    for name, kwargs in [("RNN", {"nonlinearity": "relu"}), ("GRU", {"bias": False}),
                         ("RNNCell", {"nonlinearity": "relu"}), ("GRUCell", {"bias": False}),
                         ("LSTMCell", {})]:
        ours, theirs = _pair(name, I, H, **kwargs)
        assert repr(ours) == repr(theirs)


def test_initialisation_is_uniform_within_one_over_sqrt_hidden():
    module = mg.nn.GRU(8, 100, bidirectional=True)
    for p in module.parameters():
        values = p.detach().numpy()
        assert np.abs(values).max() <= 0.1
        assert np.abs(values).max() > 0.09 and abs(values.mean()) < 0.01


def test_constructor_errors_as_torch():
    for args, kwargs in [((I, H), {"proj_size": 1}), ((I, H), {"nonlinearity": "sigmoid"}),
                         ((I, H), {"dropout": 1.5}), ((I, H), {"bias": 1}),
                         ((I, 0), {}), ((0, H), {}), ((I, H), {"num_layers": 0}),
                         ((I, 2.0), {}), ((I, H), {"batch_first": None})]:
        with pytest.raises(Exception) as expected:
            torch.nn.RNN(*args, **kwargs)
        with pytest.raises(expected.type):
            mg.nn.RNN(*args, **kwargs)
    for kwargs in [{"proj_size": H}, {"proj_size": -1}]:
        with pytest.raises(ValueError):
            torch.nn.LSTM(I, H, **kwargs)
        with pytest.raises(ValueError):
            mg.nn.LSTM(I, H, **kwargs)


def _error_type(call):
    try:
        call(torch)
    except Exception as e:  # noqa: BLE001 - whichever torch raises is the expected one
        return type(e)
    raise AssertionError("torch raised nothing")


BAD_CALLS = [
    ("wrong input size", "LSTM", lambda lib: (lib.zeros(T, B, I + 1, dtype=lib.float64),)),
    ("4-D input", "GRU", lambda lib: (lib.zeros(T, B, I, 1, dtype=lib.float64),)),
    ("1-D input", "RNN", lambda lib: (lib.zeros(I, dtype=lib.float64),)),
    ("wrong h0 batch", "GRU", lambda lib: (lib.zeros(T, B, I, dtype=lib.float64),
                                           lib.zeros(1, B + 1, H, dtype=lib.float64))),
    ("wrong h0 size", "RNN", lambda lib: (lib.zeros(T, B, I, dtype=lib.float64),
                                          lib.zeros(1, B, H + 1, dtype=lib.float64))),
    ("2-D h0 for batched input", "RNN", lambda lib: (lib.zeros(T, B, I, dtype=lib.float64),
                                                     lib.zeros(B, H, dtype=lib.float64))),
    ("3-D h0 for unbatched input", "GRU", lambda lib: (lib.zeros(T, I, dtype=lib.float64),
                                                       lib.zeros(1, 1, H, dtype=lib.float64))),
    ("wrong c0 shape", "LSTM", lambda lib: (lib.zeros(T, B, I, dtype=lib.float64),
                                            (lib.zeros(1, B, H, dtype=lib.float64),
                                             lib.zeros(1, B, H + 1, dtype=lib.float64)))),
    ("2-D states for batched input", "LSTM",
     lambda lib: (lib.zeros(T, B, I, dtype=lib.float64), (lib.zeros(B, H, dtype=lib.float64),
                                                          lib.zeros(B, H, dtype=lib.float64)))),
    ("dtype mismatch", "LSTM", lambda lib: (lib.zeros(T, B, I, dtype=lib.float32),)),
    ("no time steps", "LSTM", lambda lib: (lib.zeros(0, B, I, dtype=lib.float64),)),
    ("no time steps (GRU)", "GRU", lambda lib: (lib.zeros(0, B, I, dtype=lib.float64),)),
    ("h0 dtype mismatch", "GRU", lambda lib: (lib.zeros(T, B, I, dtype=lib.float64),
                                              lib.zeros(1, B, H, dtype=lib.float32))),
    ("cell: wrong input size", "LSTMCell", lambda lib: (lib.zeros(B, I + 1, dtype=lib.float64),)),
    ("cell: 3-D input", "GRUCell", lambda lib: (lib.zeros(1, B, I, dtype=lib.float64),)),
    ("cell: batch mismatch", "GRUCell", lambda lib: (lib.zeros(B, I, dtype=lib.float64),
                                                     lib.zeros(B + 1, H, dtype=lib.float64))),
    ("cell: wrong hidden size", "RNNCell", lambda lib: (lib.zeros(B, I, dtype=lib.float64),
                                                        lib.zeros(B, H + 1, dtype=lib.float64))),
    ("cell: 3-D hidden", "LSTMCell", lambda lib: (lib.zeros(B, I, dtype=lib.float64),
                                                  (lib.zeros(1, B, H, dtype=lib.float64),
                                                   lib.zeros(1, B, H, dtype=lib.float64)))),
]


@pytest.mark.parametrize("what,name,args", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_as_torch(what, name, args):
    ours, theirs = _pair(name, I, H)
    expected = _error_type(lambda lib: theirs(*args(lib)))
    with pytest.raises(expected):
        ours(*args(mg))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m[0] + ("," + _ids(m[1]) if m[1] else ""))
def test_an_empty_batch_gives_empty_outputs_and_zero_gradients(mode, dtype, capfd):
    """torch's answer for a batch of no sequences, and no complaint from BLAS about a product
    of no rows (it prints one per call)."""
    name, options = mode
    theirs = getattr(torch.nn, name)(I, H, num_layers=2, bidirectional=True, **options)
    ours = getattr(mg.nn, name)(I, H, num_layers=2, bidirectional=True,
                                dtype=getattr(mg, dtype), **options)
    theirs.to(getattr(torch, dtype))
    results = []
    for lib, module in ((mg, ours), (torch, theirs)):
        x = lib.zeros(T, 0, I, dtype=getattr(lib, dtype), requires_grad=True)
        out, _ = module(x)
        out.sum().backward()
        results.append([tuple(out.shape), tuple(x.grad.shape)]
                       + [(n, tuple(p.grad.shape), float(abs(p.grad).sum()))
                          for n, p in module.named_parameters()])
    assert results[0] == results[1]
    assert "SGEMM" not in "".join(capfd.readouterr())


# ----------------------------------------------------------------------------- nn.utils.rnn
def _sequences(rng, lengths, lib, requires_grad=False):
    return [lib.tensor(rng.standard_normal((n, 2)), requires_grad=requires_grad)
            for n in lengths]


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence(rng, batch_first, padding_side):
    arrays = [rng.standard_normal((n, 2)) for n in (2, 4, 1)]
    ours = [mg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = ours_rnn.pad_sequence(ours, batch_first=batch_first, padding_value=-1.5,
                                padding_side=padding_side)
    expected = torch_rnn.pad_sequence(theirs, batch_first=batch_first, padding_value=-1.5,
                                      padding_side=padding_side)
    _check_grads(([out],), ([expected],), list(zip(ours, theirs)), rng)


def test_pack_and_unpack_sequence(rng):
    arrays = [rng.standard_normal((n, 2)) for n in (2, 4, 1)]
    ours = ours_rnn.pack_sequence([mg.tensor(a) for a in arrays], enforce_sorted=False)
    theirs = torch_rnn.pack_sequence([torch.tensor(a) for a in arrays], enforce_sorted=False)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert isinstance(ours, tuple) and ours._fields == theirs._fields
    for a, b in zip(ours_rnn.unpack_sequence(ours), arrays):
        np.testing.assert_array_equal(a.numpy(), b)
    padded = rng.standard_normal((4, 3, 2))
    for lengths in ([4, 1, 3], "tensor"):
        ours_lengths = mg.tensor([4, 1, 3]) if lengths == "tensor" else lengths
        theirs_lengths = torch.tensor([4, 1, 3]) if lengths == "tensor" else lengths
        for a, b in zip(ours_rnn.pack_padded_sequence(mg.tensor(padded), ours_lengths,
                                                      enforce_sorted=False),
                        torch_rnn.pack_padded_sequence(torch.tensor(padded), theirs_lengths,
                                                       enforce_sorted=False)):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(ours_rnn.unpad_sequence(mg.tensor(padded), mg.tensor([4, 1, 3])),
                    torch_rnn.unpad_sequence(torch.tensor(padded), torch.tensor([4, 1, 3]))):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    sorted_ = ours_rnn.pack_sequence([mg.tensor(arrays[i]) for i in (1, 0, 2)])
    assert sorted_.sorted_indices is None and sorted_.unsorted_indices is None
    assert ours.double().data.dtype == mg.float64


def test_utils_errors_as_torch():
    for call in [
        lambda u, lib: u.pack_padded_sequence(lib.zeros(3, 2, 1), [1, 3]),
        lambda u, lib: u.pack_padded_sequence(lib.zeros(3, 2, 1), [3, 0]),
        lambda u, lib: u.pack_padded_sequence(lib.zeros(3, 2, 1), [3]),
        lambda u, lib: u.pad_sequence([lib.zeros(2, 1)], padding_side="middle"),
        lambda u, lib: u.pad_sequence([]),
        lambda u, lib: u.pad_packed_sequence(u.pack_sequence([lib.zeros(3, 1)]),
                                             total_length=2),
    ]:
        expected = _error_type(lambda lib: call(torch_rnn, lib))
        with pytest.raises(expected):
            call(ours_rnn, mg)
