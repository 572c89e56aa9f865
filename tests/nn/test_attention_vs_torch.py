"""scaled_dot_product_attention and MultiheadAttention against torch in float64: outputs and
input and parameter gradients to 1e-10, for every option and mask kind, and torch's errors."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad.autograd import gradcheck, gradgradcheck
from mpigrad.autograd.forward_ad import dual_level, make_dual, unpack_dual
from mpigrad.autograd.graph import reachable
from mpigrad.ops.core import OpNode

torch = pytest.importorskip("torch")
fwad = torch.autograd.forward_ad
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)


def _pair(array, requires_grad=True):
    return (mg.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


def _close(ours, theirs):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **TOL)


def _as_torch_mask(mask):
    return None if mask is None else torch.tensor(mask)


def _sdpa_both(rng, shapes, mask=None, **options):
    """Runs both attentions on the same inputs; checks outputs and all input gradients."""
    arrays = [rng.standard_normal(s) for s in shapes]
    ours, theirs = zip(*(_pair(a) for a in arrays))
    out = F.scaled_dot_product_attention(*ours, attn_mask=None if mask is None
                                         else mg.tensor(mask), **options)
    expected = torch.nn.functional.scaled_dot_product_attention(
        *theirs, attn_mask=_as_torch_mask(mask), **options)
    _close(out, expected)
    seed = rng.standard_normal(out.shape)
    out.backward(mg.tensor(seed))
    expected.backward(torch.tensor(seed))
    for a, b in zip(ours, theirs):
        _close(a.grad, b.grad)
    return out


QKV = [(2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7)]


@pytest.mark.parametrize("mask_shape", [(4, 6), (3, 4, 6), (2, 1, 4, 6), (2, 3, 4, 6), (1, 6)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masks(rng, mask_shape, kind):
    mask = (rng.random(mask_shape) > 0.4 if kind == "bool"
            else rng.standard_normal(mask_shape))
    _sdpa_both(rng, QKV, mask)


@pytest.mark.parametrize("options", [{}, {"is_causal": True}, {"scale": 0.3},
                                     {"is_causal": True, "scale": 2.0}])
def test_sdpa_options(rng, options):
    _sdpa_both(rng, QKV, **options)


def test_sdpa_causal_with_more_queries_than_keys(rng):
    _sdpa_both(rng, [(1, 2, 5, 3), (1, 2, 3, 3), (1, 2, 3, 3)], is_causal=True)


def test_sdpa_fully_masked_rows_give_zeros_as_torch(rng):
    mask = rng.random((4, 6)) > 0.5
    mask[1] = False
    out = _sdpa_both(rng, QKV, mask)
    assert np.all(out.detach().numpy()[..., 1, :] == 0)
    float_mask = np.where(mask, 0.0, -np.inf)
    _sdpa_both(rng, QKV, float_mask)


@pytest.mark.parametrize("shapes", [
    [(4, 5), (6, 5), (6, 7)],                          # 2-D, no batch
    [(3, 4, 5), (3, 6, 5), (3, 6, 2)],                 # 3-D
    [(2, 3, 4, 5), (1, 3, 6, 5), (1, 3, 6, 5)],        # batch dimensions broadcast
    [(2, 1, 3, 4, 5), (2, 1, 3, 6, 5), (2, 1, 3, 6, 5)],
])
def test_sdpa_ranks(rng, shapes):
    _sdpa_both(rng, shapes)


def test_sdpa_grouped_query_attention(rng):
    _sdpa_both(rng, [(2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5)], enable_gqa=True)
    _sdpa_both(rng, [(2, 6, 3, 5), (2, 3, 6, 5), (2, 1, 6, 5)],
               mask=rng.random((3, 6)) > 0.3, enable_gqa=True)


def test_sdpa_gradient_of_a_float_mask(rng):
    mask, torch_mask = _pair(rng.standard_normal((3, 4, 6)))
    arrays = [rng.standard_normal(s) for s in QKV]
    out = F.scaled_dot_product_attention(*(mg.tensor(a) for a in arrays), attn_mask=mask)
    expected = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in arrays), attn_mask=torch_mask)
    seed = rng.standard_normal(out.shape)
    out.backward(mg.tensor(seed))
    expected.backward(torch.tensor(seed))
    _close(mask.grad, torch_mask.grad)


def test_sdpa_float_mask_of_another_float_dtype(rng):
    q, k, v = (mg.tensor(rng.standard_normal(s)) for s in QKV)
    mask = rng.standard_normal((4, 6)).astype(np.float32)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mg.tensor(mask))
    expected = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(t.numpy()) for t in (q, k, v)), attn_mask=torch.tensor(mask))
    assert out.dtype == mg.float64
    _close(out, expected)


def test_sdpa_dropout(rng):
    q, k, v = (mg.tensor(rng.standard_normal(s)) for s in [(1, 1, 200, 4), (1, 1, 50, 4),
                                                            (1, 1, 50, 4)])
    plain = F.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.0).numpy(), plain.numpy())
    # With value = ones, each output is the kept weights' sum / (1 - p): mean 1 over many rows.
    ones = mg.ones(1, 1, 50, 4)
    mg.manual_seed(3)
    dropped = F.scaled_dot_product_attention(q, k, ones, dropout_p=0.25).numpy()[..., 0]
    assert abs(dropped.mean() - 1) < 0.05
    assert dropped.std() > 0.05
    mg.manual_seed(3)
    np.testing.assert_array_equal(
        F.scaled_dot_product_attention(q, k, ones, dropout_p=0.25).numpy()[..., 0], dropped)
    everything = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert np.all(everything.numpy() == 0)


def test_sdpa_gradcheck_gradgradcheck_and_tangents(rng):
    arrays = [rng.standard_normal(s) for s in [(1, 2, 3, 2), (1, 2, 4, 2), (1, 2, 4, 3)]]
    mask = mg.tensor(rng.random((3, 4)) > 0.3)
    float_mask = rng.standard_normal((3, 4))

    def attend(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def attend_bool(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.7)

    inputs = [mg.tensor(a, requires_grad=True) for a in arrays]
    with_mask = inputs + [mg.tensor(float_mask, requires_grad=True)]
    assert gradcheck(attend, with_mask)
    assert gradgradcheck(attend, with_mask)
    assert gradcheck(attend_bool, inputs, check_forward_ad=True)
    assert gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                     inputs, check_forward_ad=True)


def test_sdpa_tangent_against_torch(rng):
    arrays = [rng.standard_normal(s) for s in QKV]
    tangents = [rng.standard_normal(s) for s in QKV]
    mask = rng.random((4, 6)) > 0.3
    with dual_level():
        duals = [make_dual(mg.tensor(a), mg.tensor(t)) for a, t in zip(arrays, tangents)]
        ours = unpack_dual(F.scaled_dot_product_attention(*duals, attn_mask=mg.tensor(mask)))
        ours_tangent = ours.tangent.numpy()
    with fwad.dual_level():
        duals = [fwad.make_dual(torch.tensor(a), torch.tensor(t))
                 for a, t in zip(arrays, tangents)]
        with sdpa_kernel(SDPBackend.MATH):
            theirs = fwad.unpack_dual(torch.nn.functional.scaled_dot_product_attention(
                *duals, attn_mask=torch.tensor(mask)))
    np.testing.assert_allclose(ours_tangent, theirs.tangent.numpy(), **TOL)


def _saved_arrays(out):
    """The arrays the graph behind `out` keeps for backward (inputs saved by each node, and
    saved outputs), each counted once."""
    seen = {}
    for node in reachable([out.grad_fn]):
        if not isinstance(node, OpNode):
            continue
        for i, x in enumerate(node.inputs):
            if i in node.op.saved_positions and isinstance(x, mg.Tensor):
                seen[id(x._array) if x._array.base is None else id(x._array.base)] = x._array
        if node.ans is not None:
            seen[id(node.ans[0]._array)] = node.ans[0]._array
    return list(seen.values())


def test_sdpa_backward_keeps_no_attention_sized_array(rng):
    # Counted on the graph: nothing the nodes keep for backward has the (B, H, L, S) shape,
    # but for a mask of that shape the caller passed in (the backward recomputes the
    # probabilities block by block from each row's log-sum-exp).
    b, h, length, source, width = 2, 3, 7, 9, 4
    q = mg.tensor(rng.standard_normal((b, h, length, width)), requires_grad=True)
    k = mg.tensor(rng.standard_normal((b, h, source, width)), requires_grad=True)
    v = mg.tensor(rng.standard_normal((b, h, source, width)), requires_grad=True)
    masks = [rng.random((length, source)) > 0.3, rng.standard_normal((b, h, length, source))]
    for options in [{}, {"is_causal": True}] + [{"attn_mask": mg.tensor(m)} for m in masks]:
        saved = _saved_arrays(F.scaled_dot_product_attention(q, k, v, **options))
        big = [a for a in saved if a.size >= b * h * length * source and a.ndim == 4
               and a.shape[-2:] == (length, source)]
        mask = options.get("attn_mask")
        expected = 1 if mask is not None and mask.shape == (b, h, length, source) else 0
        assert len(big) == expected, [a.shape for a in saved]


def _expect(error, match, call):
    with pytest.raises(error, match=match):
        call()


def test_sdpa_errors_as_torch(rng):
    q, k, v = (mg.tensor(rng.standard_normal(s)) for s in QKV)
    tq, tk, tv = (torch.tensor(t.numpy()) for t in (q, k, v))
    cases = [
        (dict(attn_mask=np.ones((4, 6), np.int64)), "attn_mask dtype to be bool or float"),
        (dict(dropout_p=1.5), "dropout probability has to be between 0 and 1"),
    ]
    for options, match in cases:
        ours = {key: mg.tensor(val) if isinstance(val, np.ndarray) else val
                for key, val in options.items()}
        theirs = {key: torch.tensor(val) if isinstance(val, np.ndarray) else val
                  for key, val in options.items()}
        _expect(RuntimeError, match, lambda: F.scaled_dot_product_attention(q, k, v, **ours))
        _expect(RuntimeError, match, lambda: torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, **theirs))
    _expect(RuntimeError, "at least 2 dimensional", lambda: F.scaled_dot_product_attention(
        mg.ones(3), mg.ones(3), mg.ones(3)))
    _expect(RuntimeError, "same dtype", lambda: F.scaled_dot_product_attention(q, k, v.float()))
    _expect(RuntimeError, "same dtype", lambda: torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv.float()))
    gqa = [mg.ones(1, 3, 2, 4), mg.ones(1, 2, 5, 4), mg.ones(1, 2, 5, 4)]
    _expect(RuntimeError, "must divide the number of heads",
            lambda: F.scaled_dot_product_attention(*gqa, enable_gqa=True))
    _expect(RuntimeError, "must divide the number of heads",
            lambda: torch.nn.functional.scaled_dot_product_attention(
                *(torch.ones(t.shape, dtype=torch.float64) for t in gqa), enable_gqa=True))
    # torch's documented rule (its math backend raises; a CPU fused kernel silently combines).
    _expect(RuntimeError, "Explicit attn_mask should not be set when is_causal=True",
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mg.ones(4, 6) > 0,
                                                   is_causal=True))
    _expect(RuntimeError, None, lambda: F.scaled_dot_product_attention(q, k[..., :3], v))
    _expect(RuntimeError, None, lambda: torch.nn.functional.scaled_dot_product_attention(
        tq, tk[..., :3], tv))


# ----------------------------------------------------------------------------- MultiheadAttention
def _twin(torch_module, ours):
    """Loads torch_module's state dict (as numpy arrays) into `ours`, both float64; returns
    the pair (ours, torch_module)."""
    torch_module.double()
    result = ours.load_state_dict({k: v.detach().numpy() for k, v in
                                   torch_module.state_dict().items()})
    assert list(ours.state_dict()) == list(torch_module.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    return ours, torch_module


def _mha_pair(**options):
    return _twin(torch.nn.MultiheadAttention(**options), mg.nn.MultiheadAttention(**options))


def _run_both(ours, theirs, arrays, rng, masks=None, **options):
    """Calls both modules on the same inputs and masks; compares outputs, returned weights,
    input gradients and every parameter's gradient."""
    masks = masks or {}
    inputs = [_pair(a) for a in arrays]
    if not options.pop("fully_masked_rows", False):
        # Every query keeps its first key, so no row is masked everywhere (NaN in torch).
        for mask in masks.values():
            if mask.dtype == bool:
                mask[..., 0] = False
    our_out = ours(*(a for a, _ in inputs), **{k: mg.tensor(v) for k, v in masks.items()},
                   **options)
    their_out = theirs(*(b for _, b in inputs), **{k: torch.tensor(v) for k, v in masks.items()},
                       **options)
    loss, expected_loss = 0, 0
    for a, b in zip(our_out if isinstance(our_out, tuple) else [our_out],
                    their_out if isinstance(their_out, tuple) else [their_out]):
        if b is None:
            assert a is None
            continue
        _close(a, b)
        if not np.isfinite(b.detach().numpy()).all():
            continue
        seed = rng.standard_normal(tuple(b.shape))
        loss = loss + (a * mg.tensor(seed)).sum()
        expected_loss = expected_loss + (b * torch.tensor(seed)).sum()
    if isinstance(loss, int):
        return our_out
    loss.backward()
    expected_loss.backward()
    for (a, b) in inputs:
        if b.grad is not None:
            _close(a.grad, b.grad)
    theirs_named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        _close(p.grad, theirs_named[name].grad)
    return our_out


L, S, N, E, H = 4, 5, 2, 6, 3


def _qkv(rng, kdim=E, vdim=E, batch_first=False, batched=True):
    def shape(length, width):
        if not batched:
            return (length, width)
        return (N, length, width) if batch_first else (length, N, width)
    return [rng.standard_normal(shape(L, E)), rng.standard_normal(shape(S, kdim)),
            rng.standard_normal(shape(S, vdim))]


@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("options", [
    {}, {"bias": False}, {"add_bias_kv": True}, {"add_zero_attn": True},
    {"kdim": 4, "vdim": 5}, {"batch_first": True},
    {"add_bias_kv": True, "add_zero_attn": True, "kdim": 4, "vdim": 2},
])
def test_mha_options(rng, options, need_weights, average):
    ours, theirs = _mha_pair(embed_dim=E, num_heads=H, **options)
    arrays = _qkv(rng, options.get("kdim", E), options.get("vdim", E),
                  options.get("batch_first", False))
    mask = rng.random((L, S)) > 0.7
    kpm = rng.random((N, S)) > 0.7
    _run_both(ours, theirs, arrays, rng, need_weights=need_weights,
              average_attn_weights=average)
    _run_both(ours, theirs, arrays, rng, dict(attn_mask=mask, key_padding_mask=kpm),
              need_weights=need_weights, average_attn_weights=average)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masks", [
    lambda rng: dict(attn_mask=rng.random((L, S)) > 0.6),
    lambda rng: dict(attn_mask=rng.standard_normal((L, S))),
    lambda rng: dict(attn_mask=rng.random((N * H, L, S)) > 0.6),
    lambda rng: dict(attn_mask=rng.standard_normal((N * H, L, S))),
    lambda rng: dict(key_padding_mask=rng.random((N, S)) > 0.5),
    lambda rng: dict(key_padding_mask=rng.standard_normal((N, S))),
    lambda rng: dict(key_padding_mask=rng.standard_normal((N, S)),
                     attn_mask=rng.standard_normal((N * H, L, S))),
], ids=["bool2d", "float2d", "bool3d", "float3d", "kpm_bool", "kpm_float", "both_float"])
def test_mha_masks(rng, masks, need_weights):
    ours, theirs = _mha_pair(embed_dim=E, num_heads=H)
    _run_both(ours, theirs, _qkv(rng), rng, masks(rng), need_weights=need_weights)


def test_mha_self_attention_and_unbatched(rng):
    ours, theirs = _mha_pair(embed_dim=E, num_heads=H, batch_first=True)
    x = rng.standard_normal((N, L, E))
    a, b = _pair(x)
    _close(ours(a, a, a)[0], theirs(b, b, b)[0])
    unbatched = _qkv(rng, batched=False)
    _run_both(ours, theirs, unbatched, rng, dict(attn_mask=rng.random((L, S)) > 0.6,
                                                   key_padding_mask=rng.random(S) > 0.6))
    for need_weights in (True, False):
        _run_both(ours, theirs, unbatched, rng, dict(attn_mask=rng.standard_normal((H, L, S))),
                  average_attn_weights=False, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_is_causal_hint(rng, need_weights):
    ours, theirs = _mha_pair(embed_dim=E, num_heads=H)
    causal = np.triu(np.ones((L, L), bool), 1)
    arrays = [rng.standard_normal((L, N, E)) for _ in range(3)]
    _run_both(ours, theirs, arrays, rng, dict(attn_mask=causal), need_weights=need_weights,
              is_causal=True)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        ours(*(mg.tensor(a) for a in arrays), is_causal=True)


def test_mha_fully_masked_rows_as_torch(rng):
    # torch: NaN rows in the weights path (plain softmax), zeros in the fused one.
    ours, theirs = _mha_pair(embed_dim=E, num_heads=H)
    kpm = np.zeros((N, S), bool)
    kpm[1] = True
    for need_weights in (True, False):
        out = _run_both(ours, theirs, _qkv(rng), rng, dict(key_padding_mask=kpm),
                        need_weights=need_weights, fully_masked_rows=True)
        assert np.isnan(out[0].detach().numpy()[:, 1]).all() == need_weights


def test_mha_dropout(rng):
    ours = mg.nn.MultiheadAttention(E, H, dropout=0.5)
    inputs = [mg.tensor(a) for a in _qkv(rng)]
    ours.eval()
    first = ours(*inputs)[1].detach().numpy()
    np.testing.assert_array_equal(ours(*inputs)[1].detach().numpy(), first)
    ours.train()
    dropped = ours(*inputs, average_attn_weights=False)[1].detach().numpy()
    kept = dropped != 0
    assert 0.3 < kept.mean() < 0.7
    ours.eval()
    full = ours(*inputs, average_attn_weights=False)[1].detach().numpy()
    np.testing.assert_allclose(dropped[kept], 2 * full[kept], **TOL)


def test_mha_parameters_and_init(rng):
    packed = mg.nn.MultiheadAttention(E, H, add_bias_kv=True)
    assert [n for n, _ in packed.named_parameters()] == \
        [n for n, _ in torch.nn.MultiheadAttention(E, H, add_bias_kv=True).named_parameters()]
    assert isinstance(packed.out_proj, mg.nn.NonDynamicallyQuantizableLinear)
    assert isinstance(packed.out_proj, mg.nn.Linear)
    assert np.all(packed.in_proj_bias.detach().numpy() == 0)
    assert np.all(packed.out_proj.bias.detach().numpy() == 0)
    bound = np.sqrt(6 / (E + 3 * E))
    assert np.abs(packed.in_proj_weight.detach().numpy()).max() <= bound
    separate = mg.nn.MultiheadAttention(E, H, kdim=4, vdim=5, bias=False)
    assert separate.in_proj_weight is None and separate.in_proj_bias is None
    assert tuple(separate.k_proj_weight.shape) == (E, 4)
    assert tuple(separate.v_proj_weight.shape) == (E, 5)
    assert separate.out_proj.bias is None


def test_mha_errors_as_torch(rng):
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        mg.nn.MultiheadAttention(5, 2)
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        torch.nn.MultiheadAttention(5, 2)
    ours, theirs = _mha_pair(embed_dim=E, num_heads=H)
    q, k, v = _qkv(rng)
    bad_calls = [
        (AssertionError, "expected `key` and `value` to be 3-D", (q, k[0], v[0]), {}),
        (AssertionError, "batched 3D tensor but received 4-D", (q[None], k[None], v[None]), {}),
        (RuntimeError, "The shape of the 2D attn_mask is", (q, k, v),
         dict(attn_mask=np.zeros((L, L), bool))),
        (RuntimeError, "The shape of the 3D attn_mask is", (q, k, v),
         dict(attn_mask=np.zeros((H, L, S), bool))),
        (AssertionError, "expected `attn_mask` to be `None`, 2-D or 3-D", (q, k, v),
         dict(attn_mask=np.zeros((1, N * H, L, S), bool))),
        (AssertionError, r"Expected key_padded_mask.shape\[1\] to be 5", (q, k, v),
         dict(key_padding_mask=np.zeros((N, L), bool))),
        (AssertionError, "only bool and floating types of attn_mask", (q, k, v),
         dict(attn_mask=np.zeros((L, S), np.int64))),
        (AssertionError, "was expecting embedding dimension of", (q[..., :3], k, v), {}),
        (AssertionError, "does not match value shape", (q, k, v[:2]), {}),
    ]
    for error, match, arrays, masks in bad_calls:
        with pytest.raises(error, match=match):
            ours(*(mg.tensor(a) for a in arrays), **{n: mg.tensor(m) for n, m in masks.items()})
        with pytest.raises(error, match=match):
            theirs(*(torch.tensor(a) for a in arrays),
                   **{n: torch.tensor(m) for n, m in masks.items()})


def test_float32_stays_float32(rng):
    q, k, v = (mg.tensor(rng.standard_normal(s).astype(np.float32)) for s in QKV)
    assert F.scaled_dot_product_attention(q, k, v, is_causal=True).dtype == mg.float32
    assert F.scaled_dot_product_attention(q, k, v, scale=np.float64(0.5)).dtype == mg.float32
    mha = mg.nn.MultiheadAttention(E, H, dtype=mg.float32)
    x = mg.tensor(rng.standard_normal((L, N, E)).astype(np.float32))
    out, weights = mha(x, x, x)
    assert out.dtype == weights.dtype == mg.float32
    assert mha(x, x, x, need_weights=False)[0].dtype == mg.float32


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_gradcheck_gradgradcheck_and_tangents(rng, need_weights):
    mha = mg.nn.MultiheadAttention(4, 2, add_bias_kv=True, kdim=3, vdim=2)
    query = mg.tensor(rng.standard_normal((3, 1, 4)), requires_grad=True)
    key = mg.tensor(rng.standard_normal((2, 1, 3)), requires_grad=True)
    value = mg.tensor(rng.standard_normal((2, 1, 2)), requires_grad=True)
    mask = mg.tensor(np.array([[False, True], [False, False], [True, False]]))

    def attend(q, k, v):
        out, weights = mha(q, k, v, attn_mask=mask, need_weights=need_weights)
        return out if weights is None else out.sum() + (weights * weights).sum()

    assert gradcheck(attend, (query, key, value), check_forward_ad=True)
    assert gradgradcheck(attend, (query, key, value))


@pytest.mark.parametrize("mask,match", [
    (np.ones((3, 6), bool), r"size of tensor a \(4\) must match the size of tensor b \(3\) at "
                            r"non-singleton dimension 0"),
    (np.ones((3, 6)), r"size of tensor a \(4\) must match the size of tensor b \(3\)"),
    (np.ones((2, 4, 6)), r"output with shape \[4, 6\] doesn't match the broadcast shape "
                         r"\[2, 4, 6\]"),
])
def test_sdpa_mask_shape_errors_as_torch(rng, mask, match):
    q, k = rng.standard_normal((4, 5)), rng.standard_normal((6, 5))
    with pytest.raises(RuntimeError, match=match):
        F.scaled_dot_product_attention(mg.tensor(q), mg.tensor(k), mg.tensor(k),
                                       attn_mask=mg.tensor(mask))
    with pytest.raises(RuntimeError, match=match):
        torch.nn.functional.scaled_dot_product_attention(
            torch.tensor(q), torch.tensor(k), torch.tensor(k), attn_mask=torch.tensor(mask))

