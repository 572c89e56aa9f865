"""Transformer layers, stacks and the full model against torch in float64: a torch state dict
loads unchanged and gives the same outputs, input gradients and parameter gradients (1e-10),
for every option; torch's errors for bad input."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

TOL = dict(rtol=1e-10, atol=1e-10)
D, NHEAD, FF, N, S, T = 8, 2, 12, 2, 5, 4


def _twin(ours, theirs):
    theirs.double()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert list(ours.state_dict()) == list(theirs.state_dict())
    return ours, theirs


def _compare(ours, theirs, arrays, rng, **kwargs):
    """Both modules on the same inputs (arrays) and keyword tensors (numpy arrays in kwargs,
    turned into each library's tensors); compares output and all gradients."""
    ins = [(mg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True))
           for a in arrays]
    def convert(value, lib):
        return lib.tensor(value) if isinstance(value, np.ndarray) else value
    out = ours(*(a for a, _ in ins), **{k: convert(v, mg) for k, v in kwargs.items()})
    expected = theirs(*(b for _, b in ins), **{k: convert(v, torch) for k, v in kwargs.items()})
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), **TOL)
    seed = rng.standard_normal(tuple(expected.shape))
    out.backward(mg.tensor(seed))
    expected.backward(torch.tensor(seed))
    for a, b in ins:
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **TOL)
    theirs_named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), theirs_named[name].grad.numpy(), **TOL,
                                   err_msg=name)


def _seq(rng, length, batch_first=False, batched=True):
    if not batched:
        return rng.standard_normal((length, D))
    return rng.standard_normal((N, length, D) if batch_first else (length, N, D))


def _no_full_rows(mask):
    mask[..., 0] = False
    return mask


OPTIONS = [
    {}, {"norm_first": True}, {"activation": "gelu"}, {"activation": F.gelu},
    {"bias": False}, {"batch_first": True}, {"layer_norm_eps": 1e-3},
    {"norm_first": True, "activation": "gelu", "batch_first": True, "bias": False},
]


def _activation_for_torch(options):
    # A callable activation is each library's own function, the same function by meaning.
    theirs = dict(options)
    if options.get("activation") is F.gelu:
        theirs["activation"] = torch.nn.functional.gelu
    return theirs


def _layer_pair(name, **options):
    """The layer class `name` of both libraries, built alike, with torch's weights in ours."""
    return _twin(getattr(mg.nn, name)(D, NHEAD, FF, dropout=0.0, **options),
                 getattr(torch.nn, name)(D, NHEAD, FF, dropout=0.0,
                                         **_activation_for_torch(options)))


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(map(str, o)) or "default")
def test_encoder_layer(rng, options):
    ours, theirs = _layer_pair("TransformerEncoderLayer", **options)
    bf = options.get("batch_first", False)
    _compare(ours, theirs, [_seq(rng, S, bf)], rng)
    causal = np.triu(np.full((S, S), -np.inf), 1)
    _compare(ours, theirs, [_seq(rng, S, bf)], rng, src_mask=causal, is_causal=True)
    _compare(ours, theirs, [_seq(rng, S, bf)], rng,
             src_mask=_no_full_rows(rng.random((S, S)) > 0.6),
             src_key_padding_mask=_no_full_rows(rng.random((N, S)) > 0.6))


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(map(str, o)) or "default")
def test_decoder_layer(rng, options):
    ours, theirs = _layer_pair("TransformerDecoderLayer", **options)
    bf = options.get("batch_first", False)
    _compare(ours, theirs, [_seq(rng, T, bf), _seq(rng, S, bf)], rng)
    _compare(ours, theirs, [_seq(rng, T, bf), _seq(rng, S, bf)], rng,
             tgt_mask=np.triu(np.full((T, T), -np.inf), 1), tgt_is_causal=True,
             memory_mask=rng.standard_normal((T, S)),
             tgt_key_padding_mask=_no_full_rows(rng.random((N, T)) > 0.6),
             memory_key_padding_mask=_no_full_rows(rng.random((N, S)) > 0.6))


def test_layers_unbatched(rng):
    ours, theirs = _layer_pair("TransformerEncoderLayer")
    _compare(ours, theirs, [_seq(rng, S, batched=False)], rng,
             src_key_padding_mask=_no_full_rows(rng.random(S) > 0.5))
    ours, theirs = _layer_pair("TransformerDecoderLayer")
    _compare(ours, theirs, [_seq(rng, T, batched=False), _seq(rng, S, batched=False)], rng)


def test_callable_module_activation(rng):
    ours, theirs = _twin(
        mg.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0, activation=mg.nn.SiLU()),
        torch.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0, activation=torch.nn.SiLU()))
    _compare(ours, theirs, [_seq(rng, S)], rng)


def test_encoder_and_decoder_stacks(rng):
    ours, theirs = _twin(
        mg.nn.TransformerEncoder(mg.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0), 2,
                                 norm=mg.nn.LayerNorm(D), enable_nested_tensor=False),
        torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0),
                                    2, norm=torch.nn.LayerNorm(D), enable_nested_tensor=False))
    causal = np.triu(np.full((S, S), -np.inf), 1)
    # Without is_causal, both detect that the mask is the causal one.
    _compare(ours, theirs, [_seq(rng, S)], rng, mask=causal,
             src_key_padding_mask=_no_full_rows(rng.random((N, S)) > 0.6))
    _compare(ours, theirs, [_seq(rng, S)], rng, mask=causal)
    ours, theirs = _twin(
        mg.nn.TransformerDecoder(mg.nn.TransformerDecoderLayer(D, NHEAD, FF, dropout=0.0), 2),
        torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(D, NHEAD, FF, dropout=0.0),
                                    2))
    _compare(ours, theirs, [_seq(rng, T), _seq(rng, S)], rng,
             tgt_mask=np.triu(np.full((T, T), -np.inf), 1))


@pytest.mark.parametrize("options", [{}, {"batch_first": True, "norm_first": True},
                                     {"activation": "gelu", "bias": False}])
def test_transformer(rng, options):
    ours, theirs = _twin(
        mg.nn.Transformer(D, NHEAD, 2, 1, FF, dropout=0.0, **options),
        torch.nn.Transformer(D, NHEAD, 2, 1, FF, dropout=0.0, **options))
    bf = options.get("batch_first", False)
    _compare(ours, theirs, [_seq(rng, S, bf), _seq(rng, T, bf)], rng,
             tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(T).double().numpy(),
             src_key_padding_mask=_no_full_rows(rng.random((N, S)) > 0.6),
             memory_key_padding_mask=_no_full_rows(rng.random((N, S)) > 0.6))


def test_transformer_initialisation():
    model = mg.nn.Transformer(D, NHEAD, 1, 1, FF)
    weight = model.encoder.layers[0].linear1.weight.detach().numpy()
    assert np.abs(weight).max() <= np.sqrt(6 / (D + FF))
    assert model.encoder.layers[0].linear1.weight is not model.encoder.layers[0].linear2.weight
    assert isinstance(model.encoder.norm, mg.nn.LayerNorm)
    stack = mg.nn.TransformerEncoder(mg.nn.TransformerEncoderLayer(D, NHEAD, FF), 2)
    first, second = stack.layers
    np.testing.assert_array_equal(first.linear1.weight.detach().numpy(),
                                  second.linear1.weight.detach().numpy())
    assert first.linear1.weight is not second.linear1.weight


def test_generate_square_subsequent_mask():
    ours = mg.nn.Transformer.generate_square_subsequent_mask(4)
    theirs = torch.nn.Transformer.generate_square_subsequent_mask(4)
    assert ours.dtype == mg.get_default_dtype()  # as torch's, which has torch's default
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert mg.nn.Transformer.generate_square_subsequent_mask(3, dtype=mg.float32).dtype == \
        mg.float32


def test_dropout_in_training_and_eval(rng):
    layer = mg.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.5)
    x = mg.tensor(_seq(rng, S))
    layer.eval()
    reference = mg.nn.TransformerEncoderLayer(D, NHEAD, FF, dropout=0.0)
    reference.load_state_dict(layer.state_dict())
    np.testing.assert_array_equal(layer(x).detach().numpy(), reference(x).detach().numpy())
    layer.train()
    mg.manual_seed(1)
    first = layer(x).detach().numpy()
    mg.manual_seed(1)
    np.testing.assert_array_equal(layer(x).detach().numpy(), first)
    assert not np.allclose(first, reference(x).detach().numpy())


def test_errors_as_torch(rng):
    for lib in (mg, torch):
        with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
            lib.nn.TransformerEncoderLayer(D, NHEAD, activation="tanh")
        model = lib.nn.Transformer(D, NHEAD, 1, 1, FF).double()
        src, tgt = lib.tensor(_seq(rng, S)), lib.tensor(rng.standard_normal((T, N + 1, D)))
        with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
            model(src, tgt)
        with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal"):
            model(src, lib.tensor(rng.standard_normal((T, N, D + 1))))


@pytest.mark.parametrize("norm_first", [False, True])
def test_layers_gradcheck_gradgradcheck_and_tangents(rng, norm_first):
    encoder = mg.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, activation="gelu",
                                            norm_first=norm_first)
    decoder = mg.nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, norm_first=norm_first)
    causal = mg.nn.Transformer.generate_square_subsequent_mask(3)

    def both(src, tgt):
        memory = encoder(src, src_key_padding_mask=mg.tensor([[False, False, True]]))
        return decoder(tgt, memory, tgt_mask=causal, tgt_is_causal=True)

    inputs = tuple(mg.tensor(rng.standard_normal((3, 1, 4)), requires_grad=True)
                   for _ in range(2))
    assert gradcheck(both, inputs, check_forward_ad=True)
    assert gradgradcheck(both, inputs)


def test_training_steps_stay_equal_to_torch(rng):
    ours, theirs = _twin(mg.nn.Transformer(D, NHEAD, 1, 1, FF, dropout=0.0, batch_first=True),
                         torch.nn.Transformer(D, NHEAD, 1, 1, FF, dropout=0.0, batch_first=True))
    our_opt = mg.optim.AdamW(ours.parameters(), lr=1e-2)
    their_opt = torch.optim.AdamW(theirs.parameters(), lr=1e-2)
    src, tgt = rng.standard_normal((N, S, D)), rng.standard_normal((N, T, D))
    target = rng.standard_normal((N, T, D))
    mask = np.triu(np.full((T, T), -np.inf), 1)
    losses = []
    for model, opt, lib in ((ours, our_opt, mg), (theirs, their_opt, torch)):
        history = []
        for _ in range(4):
            out = model(lib.tensor(src), lib.tensor(tgt), tgt_mask=lib.tensor(mask))
            loss = ((out - lib.tensor(target)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append(loss.item())
        losses.append(history)
    np.testing.assert_allclose(losses[0], losses[1], **TOL)
    assert losses[0][-1] < losses[0][0]
    theirs_named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), theirs_named[name].detach().numpy(),
                                   **TOL, err_msg=name)
