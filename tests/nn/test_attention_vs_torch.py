"""scaled_dot_product_attention and MultiheadAttention against torch in float64: outputs and
input and parameter gradients to 1e-10, for every option and mask kind, and torch's errors."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad.autograd import gradcheck, gradgradcheck
from mpigrad.autograd.forward_ad import dual_level, make_dual, unpack_dual

torch = pytest.importorskip("torch")

TOL = dict(rtol=1e-10, atol=1e-10)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


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
    import torch.autograd.forward_ad as fwad
    with fwad.dual_level():
        duals = [fwad.make_dual(torch.tensor(a), torch.tensor(t))
                 for a, t in zip(arrays, tangents)]
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            theirs = fwad.unpack_dual(torch.nn.functional.scaled_dot_product_attention(
                *duals, attn_mask=torch.tensor(mask)))
    np.testing.assert_allclose(ours_tangent, theirs.tangent.numpy(), **TOL)


def _saved_arrays(out):
    """The arrays the graph behind `out` keeps for backward (inputs saved by each node, and
    saved outputs), each counted once."""
    from mpigrad.autograd.graph import reachable
    from mpigrad.ops.core import OpNode
    seen = {}
    for node in reachable([out.grad_fn]):
        if not isinstance(node, OpNode):
            continue
        for i in node.op.saved_positions:
            x = node.inputs[i]
            if isinstance(x, mg.Tensor):
                seen[id(x.data) if x.data.base is None else id(x.data.base)] = x.data
        if node.ans is not None:
            seen[id(node.ans[0].data)] = node.ans[0].data
    return list(seen.values())


def test_sdpa_backward_keeps_one_attention_sized_array(rng):
    # Counted on the graph: of everything the nodes keep for backward, only the softmax's
    # output (read again by the product with value) has the (B, H, L, S) shape.
    b, h, length, source, width = 2, 3, 7, 9, 4
    q = mg.tensor(rng.standard_normal((b, h, length, width)), requires_grad=True)
    k = mg.tensor(rng.standard_normal((b, h, source, width)), requires_grad=True)
    v = mg.tensor(rng.standard_normal((b, h, source, width)), requires_grad=True)
    for options in [{}, {"is_causal": True}, {"attn_mask": mg.tensor(rng.random((length, source)) > 0.3)},
                    {"attn_mask": mg.tensor(rng.standard_normal((b, h, length, source)))}]:
        saved = _saved_arrays(F.scaled_dot_product_attention(q, k, v, **options))
        big = [a for a in saved if a.size >= b * h * length * source and a.ndim == 4
               and a.shape[-2:] == (length, source)]
        assert len(big) == 1, [a.shape for a in saved]


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
