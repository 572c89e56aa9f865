"""scaled_dot_product_attention block by block: the fused forward and backward against torch
(masks of every kind and shape, causal with L < S and L > S, scale, grouped-query heads,
fully masked rows, sizes that are not a multiple of the tile, non-contiguous inputs), with
the default tiles and with tiles of 5 queries x 3 keys (every size crosses tile edges);
dropout statistically and by consistency between the fused path and the rules; gradcheck
and gradgradcheck; and the memory bound."""
import tracemalloc

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import gradcheck, gradgradcheck  # noqa: E402
from mpigrad.autograd.graph import reachable  # noqa: E402
from mpigrad.kernels import NUMPY  # noqa: E402
from mpigrad.kernels.numpy import attention as kernel  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from .torch_check import TOLERANCE, check  # noqa: E402

F = mg.nn.functional
TF = torch.nn.functional
DTYPES = [np.float64, np.float32]


@pytest.fixture(params=[(kernel.BLOCK_Q, kernel.BLOCK_K), (5, 3)],
                ids=["default-tiles", "tiles-5x3"])
def tiles(request, monkeypatch):
    """The kernel's tile sizes (small ones make every test cross tile edges)."""
    monkeypatch.setattr(kernel, "BLOCK_Q", request.param[0])
    monkeypatch.setattr(kernel, "BLOCK_K", request.param[1])
    return request.param


def _data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _theirs(**options):
    # torch's math backend: its fused CPU kernel has no forward-mode (tangent) rule.
    def run(*tensors, **more):
        with sdpa_kernel(SDPBackend.MATH):
            return TF.scaled_dot_product_attention(*tensors, **options, **more)
    return run


def _ours(**options):
    return lambda *tensors, **more: F.scaled_dot_product_attention(*tensors, **options, **more)


def _with_mask(function, mask):
    """function(q, k, v, attn_mask=mask) where mask is a fixed bool array."""
    return lambda q, k, v: function(q, k, v, attn_mask=mask)


# (q, k, v) shapes: sizes not multiples of the tiles, L != S both ways, E != Ev.
SHAPES = {"L<S": [(2, 3, 9, 5), (2, 3, 13, 5), (2, 3, 13, 4)],
          "L>S": [(1, 2, 13, 4), (1, 2, 6, 4), (1, 2, 6, 3)]}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", sorted(SHAPES))
@pytest.mark.parametrize("options", [{}, {"is_causal": True}, {"scale": 0.3},
                                     {"is_causal": True, "scale": -1.7}],
                         ids=["plain", "causal", "scale", "causal-negative-scale"])
def test_attention_matches_torch(tiles, options, shapes, dtype):
    arrays = [_data(s, i) for i, s in enumerate(SHAPES[shapes])]
    check(_ours(**options), _theirs(**options), arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(9, 13), (3, 9, 13), (2, 1, 9, 13), (2, 3, 9, 13),
                                        (1, 13), (9, 1)])
def test_float_masks_and_their_gradient(tiles, mask_shape, dtype):
    arrays = [_data(s, i) for i, s in enumerate(SHAPES["L<S"])] + [_data(mask_shape, 9)]
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          lambda q, k, v, m: _theirs()(q, k, v, m), arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(9, 13), (2, 3, 9, 13), (3, 1, 13)])
def test_bool_masks(tiles, mask_shape, dtype):
    keep = np.random.default_rng(4).random(mask_shape) > 0.4
    arrays = [_data(s, i) for i, s in enumerate(SHAPES["L<S"])]
    check(_with_mask(_ours(), mg.tensor(keep)), _with_mask(_theirs(), torch.tensor(keep)),
          arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fully_masked_rows_give_zeros_as_torch(tiles, dtype):
    # torch 2.13 on CPU gives zeros (its fused kernel and its math path's _safe_softmax)
    # for a row whose keys are all masked, with a bool or a -inf float mask, and no
    # gradient through that row.
    keep = np.random.default_rng(4).random((9, 13)) > 0.5
    keep[[0, 4, 8]] = False
    arrays = [_data(s, i) for i, s in enumerate(SHAPES["L<S"])]
    out, grads = check(_with_mask(_ours(), mg.tensor(keep)),
                       _with_mask(_theirs(), torch.tensor(keep)), arrays, dtype)
    assert np.all(out.detach().numpy()[..., [0, 4, 8], :] == 0)
    assert np.all(grads[0].numpy()[..., [0, 4, 8], :] == 0)
    additive = np.where(keep, 0.0, -np.inf)
    check(_with_mask(_ours(), mg.tensor(additive.astype(dtype))),
          _with_mask(_theirs(), torch.tensor(additive.astype(dtype))), arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_query_attention(tiles, dtype):
    arrays = [_data(s, i) for i, s in enumerate([(2, 6, 7, 4), (2, 2, 11, 4), (2, 2, 11, 5)])]
    check(_ours(enable_gqa=True), _theirs(enable_gqa=True), arrays, dtype)
    check(_ours(enable_gqa=True, is_causal=True), _theirs(enable_gqa=True, is_causal=True),
          arrays, dtype)
    # key and value with different head counts
    arrays = [_data(s, i) for i, s in enumerate([(1, 6, 5, 4), (1, 3, 7, 4), (1, 1, 7, 4)])]
    check(_ours(enable_gqa=True), _theirs(enable_gqa=True), arrays, dtype)


@pytest.mark.parametrize("shapes", [
    [(9, 5), (13, 5), (13, 4)],
    [(3, 9, 5), (3, 13, 5), (3, 13, 4)],
    [(2, 3, 9, 5), (1, 3, 13, 5), (1, 1, 13, 5)],
    [(2, 1, 3, 9, 5), (1, 2, 3, 13, 5), (2, 2, 1, 13, 5)],
], ids=["2d", "3d", "broadcast-4d", "broadcast-5d"])
def test_ranks_and_broadcast_batches(tiles, shapes):
    arrays = [_data(s, i) for i, s in enumerate(shapes)]
    check(_ours(is_causal=True), _theirs(is_causal=True), arrays, np.float64)
    mask = _data((2, 1, 1, 9, 13)[-len(shapes[0]):], 7)
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          lambda q, k, v, m: _theirs()(q, k, v, m), arrays + [mask], np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_inputs(tiles, dtype):
    # The GPT's layout: (B, T, H, D) viewed as (B, H, T, D), and a strided slice.
    def project(x):
        return x.transpose(1, 2)[..., ::2, :]

    arrays = [_data((2, 17, 3, 4), i) for i in range(3)]

    def run(function):
        return lambda q, k, v: function(project(q), project(k), project(v), is_causal=True)
    check(run(F.scaled_dot_product_attention), run(_theirs()), arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_rows_and_empty_heads(tiles, dtype):
    # BLAS reads blocks of rows by their row stride, which a length-1 dimension leaves
    # arbitrary (here 1 element, under the row's 4, for the one query and key: a (4, 1)
    # matrix transposed), and which must still be at least a row for a head of width 0.
    def one_row(x):
        return x.transpose(-1, -2)

    arrays = [_data((2, 3, 4, 1), i) for i in range(3)]
    for options in ({}, {"is_causal": True}):
        def run(function):
            return lambda q, k, v: function(one_row(q), one_row(k), one_row(v), **options)
        check(run(F.scaled_dot_product_attention), run(_theirs()), arrays, dtype)
    empty = [np.zeros((2, 3, 5, 0)), np.zeros((2, 3, 7, 0)), _data((2, 3, 7, 4), 3)]
    check(F.scaled_dot_product_attention, _theirs(), empty, dtype)


def test_the_loops_get_only_c_contiguous_writeable_arrays(monkeypatch):
    # Another layout or a read-only array compiles the loops once more, seconds a signature,
    # and np.dot copies strided tiles. q, k, v sliced from a packed qkv, as in a GPT, come as
    # 1-d arrays over the packed memory with their strides: read in place, not copied.
    loops = kernel.loops("attention")
    seen = []
    for name in ("forward", "backward"):
        def spy(*args, original=getattr(loops, name)):
            seen.extend(a for a in args if isinstance(a, np.ndarray))
            return original(*args)
        monkeypatch.setattr(loops, name, spy)
    packed = mg.tensor(_data((2, 9, 3, 3, 4), 0), requires_grad=True)
    q, k, v = (packed[:, :, i].transpose(1, 2) for i in range(3))
    mask = mg.tensor(_data((9, 9), 1), requires_grad=True)
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    assert len(seen) > 10
    assert all(a.flags.c_contiguous and a.flags.writeable for a in seen)
    assert sum(np.shares_memory(a, packed.detach().numpy()) for a in seen) == 6  # fwd, bwd
    seen.clear()
    # a read-only input (expand's broadcast view, here a C-contiguous one) is copied,
    # writeable, and still right
    shared = mg.tensor(_data((2, 3, 9, 4), 2)).expand(2, 3, 9, 4)
    ours = F.scaled_dot_product_attention(q, shared, shared)
    theirs = TF.scaled_dot_product_attention(*(torch.tensor(t.detach().numpy()) for t in
                                               (q, shared, shared)))
    assert seen and all(a.flags.c_contiguous and a.flags.writeable for a in seen)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_the_output_is_contiguous_as_torchs():
    q, k, v = (mg.tensor(_data(s, i)) for i, s in enumerate(SHAPES["L<S"]))
    out = F.scaled_dot_product_attention(q, k, v)
    assert out.is_contiguous()
    assert out.view(2, 3 * 9 * 4).shape == (2, 108)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_output_is_laid_out_as_the_query_as_torchs(dtype):
    """A GPT's q, k and v are transposed views of one packed product: the output then lies
    (B, L, H, E) in memory, as torch's does, so that y.transpose(1, 2).contiguous() copies
    nothing; the values and the gradients through that path are torch's."""
    data = _data((2, 9, 3, 3, 4), 3).astype(dtype)
    g = _data((2, 9, 12), 4).astype(dtype)
    results = []
    for lib, functional in ((mg, F), (torch, TF)):
        packed = lib.tensor(data, requires_grad=True)
        q, k, v = (packed[:, :, i].transpose(1, 2) for i in range(3))
        y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        merged = y.transpose(1, 2).contiguous()
        merged.view(2, 9, 12).backward(lib.tensor(g))
        results.append((y, merged, packed.grad))
    (ours, ours_merged, ours_grad), (theirs, _, theirs_grad) = results
    assert ours.stride() == theirs.stride() == (108, 4, 12, 1)
    assert np.shares_memory(ours_merged.detach().numpy(), ours.detach().numpy())
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(),
                               **TOLERANCE[dtype])
    np.testing.assert_allclose(ours_grad.numpy(), theirs_grad.numpy(), **TOLERANCE[dtype])


def test_half_precision_runs_in_float32():
    arrays = [_data(s, i).astype(np.float16) for i, s in enumerate(SHAPES["L<S"])]
    out = F.scaled_dot_product_attention(*(mg.tensor(a) for a in arrays), is_causal=True)
    assert out.dtype == mg.float16
    expected = TF.scaled_dot_product_attention(*(torch.tensor(a).float() for a in arrays),
                                               is_causal=True)
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected.numpy(), atol=2e-3)


def test_a_nan_reaches_its_rows_only():
    q, k, v = (_data(s, i) for i, s in enumerate(SHAPES["L<S"]))
    q[0, 1, 2, 3] = np.nan
    k[1, 0, 4, 0] = np.nan
    ours = F.scaled_dot_product_attention(mg.tensor(q), mg.tensor(k), mg.tensor(v)).numpy()
    theirs = TF.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v))).numpy()
    np.testing.assert_allclose(ours, theirs, equal_nan=True, **TOLERANCE[np.float64])
    assert np.isnan(ours[0, 1, 2]).all() and np.isnan(ours[1, 0]).all()
    assert not np.isnan(ours[0, 0]).any()


def _seeded(seed, **options):
    """Attention whose dropout draws the same mask on every call (gradcheck calls it many
    times)."""
    def run(*tensors, **more):
        mg.manual_seed(seed)
        return F.scaled_dot_product_attention(*tensors, **options, **more)
    return run


def test_dropout_keeps_each_weight_with_probability_1_minus_p():
    # value = identity columns: each output row is the row's kept weights / (1 - p), so
    # every element of the mask is seen, in every head and tile.
    length, source, p = 70, 90, 0.3
    q, k = (mg.tensor(_data((2, 3, n, 8), i)) for i, n in enumerate((length, source)))
    eye = mg.tensor(np.broadcast_to(np.eye(source), (2, 3, source, source)).copy())
    mg.manual_seed(11)
    dropped = F.scaled_dot_product_attention(q, k, eye, dropout_p=p).numpy()
    plain = F.scaled_dot_product_attention(q, k, eye).numpy()
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], plain[kept] / (1 - p), rtol=1e-12)
    fraction, count = kept.mean(), kept.size
    assert abs(fraction - (1 - p)) < 5 * np.sqrt(p * (1 - p) / count)
    per_head = kept.mean(axis=(2, 3))
    assert np.all(abs(per_head - (1 - p)) < 5 * np.sqrt(p * (1 - p) / kept[0, 0].size))
    assert len({kept[b, h].tobytes() for b in range(2) for h in range(3)}) == 6
    # The same seed draws the same mask, another seed another one.
    mg.manual_seed(11)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, eye, dropout_p=p)
                                  .numpy(), dropped)
    mg.manual_seed(12)
    assert not np.array_equal(F.scaled_dot_product_attention(q, k, eye, dropout_p=p).numpy(),
                              dropped)
    assert np.all(F.scaled_dot_product_attention(q, k, eye, dropout_p=1.0).numpy() == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_forward_and_fused_backward_agree_with_the_rules(tiles, dtype):
    # The fused backward (create_graph=False) and the rules (create_graph=True) find the
    # forward's dropout mask from the seed: their gradients agree, and the forward equals
    # the composition with the rules' dropout factors.
    arrays = [_data(s, i).astype(dtype) for i, s in enumerate(SHAPES["L<S"])]
    mask = _data((3, 9, 13), 5).astype(dtype)
    inputs = [mg.tensor(a, requires_grad=True) for a in arrays + [mask]]
    attend = _seeded(3, dropout_p=0.4, scale=0.8)
    out = attend(*inputs[:3], attn_mask=inputs[3])
    seed_grad = mg.tensor(_data(out.shape, 8).astype(dtype))
    fused = mg.autograd.grad(out, inputs, seed_grad)
    rules = mg.autograd.grad(attend(*inputs[:3], attn_mask=inputs[3]), inputs, seed_grad,
                             create_graph=True)
    for a, b in zip(fused, rules):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), **TOLERANCE[dtype])
    q, k, v = arrays
    scores = q @ k.swapaxes(-1, -2) * 0.8 + mask
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    mg.manual_seed(3)
    seed = int(mg.random.integers_array(0, 2 ** 63 - 1, (), np.int64))
    factor = NUMPY.forwards["attention_dropout"](weights.shape, 0.4, seed, weights.dtype)
    assert set(np.unique(factor)) == {0, dtype(1 / 0.6)}
    np.testing.assert_allclose(out.detach().numpy(), (weights * factor) @ v,
                               **TOLERANCE[dtype])


def test_gradcheck_and_gradgradcheck(monkeypatch):
    # Tiles of 5 queries and 3 keys: the fused backward crosses tile edges (the rules, which
    # gradgradcheck goes through, have no tiles).
    monkeypatch.setattr(kernel, "BLOCK_Q", 5)
    monkeypatch.setattr(kernel, "BLOCK_K", 3)
    arrays = [_data(s, i) for i, s in enumerate([(1, 2, 6, 3), (1, 2, 7, 3), (1, 2, 7, 2)])]
    inputs = [mg.tensor(a, requires_grad=True) for a in arrays]
    float_mask = mg.tensor(_data((6, 7), 4), requires_grad=True)
    keep = np.random.default_rng(5).random((2, 6, 7)) > 0.3
    keep[0, 2] = False
    cases = [(_ours(is_causal=True, scale=0.6), inputs),
             (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
              inputs + [float_mask]),
             (_with_mask(_ours(), mg.tensor(keep)), inputs),
             (_seeded(5, dropout_p=0.3, is_causal=True), inputs)]
    for function, args in cases:
        assert gradcheck(function, args, check_forward_ad=True)
        assert gradgradcheck(function, args)
    grouped = [mg.tensor(_data(s, i), requires_grad=True)
               for i, s in enumerate([(1, 4, 3, 2), (1, 2, 5, 2), (1, 2, 5, 2)])]
    assert gradcheck(_ours(enable_gqa=True), grouped, check_forward_ad=True)
    assert gradgradcheck(_ours(enable_gqa=True), grouped)


def test_multi_head_attention_without_weights_runs_the_fused_op():
    mha = mg.nn.MultiheadAttention(8, 2, batch_first=True)
    x = mg.tensor(_data((3, 5, 8), 0).astype(np.float32), requires_grad=True)
    out, weights = mha(x, x, x, need_weights=False, attn_mask=mg.nn.Transformer
                       .generate_square_subsequent_mask(5), is_causal=True)
    assert weights is None
    names = {type(node).__name__ for node in reachable([out.grad_fn])}
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in names


def test_forward_and_backward_never_hold_an_attention_sized_array():
    # B H T T float32 is 8 MiB at T = 1024; what the op allocates is the size of its
    # inputs: the scaled q, the packed output, the gradients, 64 KiB each. (tracemalloc sees
    # numpy's allocations; the loops' own tile buffers, allocated by numba, are a few
    # (64, 64) tiles.) The composition's peak was several (B, H, T, T) arrays.
    batch, heads, length, width = 1, 2, 1024, 8
    full = batch * heads * length * length * 4
    inputs = [mg.tensor(_data((batch, heads, length, width), i).astype(np.float32),
                        requires_grad=True) for i in range(3)]
    F.scaled_dot_product_attention(*inputs[:3], is_causal=True).sum().backward()  # compiled
    tracemalloc.start()
    try:
        out = F.scaled_dot_product_attention(*inputs, is_causal=True)
        out.backward(mg.ones_like(out))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < full / 8, f"peak {peak} bytes, a (B, H, T, T) array is {full}"
    assert inputs[0].grad is not None and np.isfinite(inputs[0].grad.numpy()).all()
