"""The tensor ops transformer code reaches for (issue 20), against torch in float64: values,
gradients of every input, result dtypes and torch's errors. Second derivatives and tangents
are in tests/ops/test_gradcheck_ops.py (CASES)."""
import re
import warnings

import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def _both(arrays, requires_grad=True):
    ours = [mg.tensor(a, requires_grad=requires_grad and a.dtype.kind == "f") for a in arrays]
    theirs = [torch.tensor(a, requires_grad=requires_grad and a.dtype.kind == "f")
              for a in arrays]
    return ours, theirs


def _check(fn_ours, fn_theirs, *arrays, seed=0):
    """Forward equal to 1e-10, and the gradient of every float input for a random upstream."""
    ours, theirs = _both(arrays)
    out, expected = fn_ours(*ours), fn_theirs(*theirs)
    assert out.shape == tuple(expected.shape)
    assert out.dtype == np.dtype(str(expected.dtype).removeprefix("torch."))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    if not expected.requires_grad:
        return
    upstream = np.random.default_rng(seed).standard_normal(out.shape)
    (out * mg.tensor(upstream)).sum().backward()
    (expected * torch.tensor(upstream)).sum().backward()
    for o, t in zip(ours, theirs):
        if t.grad is not None:
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


rng = np.random.default_rng(7)


def _randn(*shape):
    return rng.standard_normal(shape)


EINSUM = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("ii", [(4, 4)]),
    ("ii->i", [(3, 3)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->", [(5,), (5,)]),
    ("...ij,...jk->...ik", [(2, 2, 3, 4), (4, 2)]),
    ("...j,j", [(2, 3, 4), (4,)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("ijk,ikl->ijl", [(2, 1, 3), (2, 3, 2)]),
    ("a...,a...->...", [(3, 2, 2), (3, 1, 2)]),
    ("i j , j k -> i k", [(2, 3), (3, 2)]),
    ("ijk", [(2, 3, 4)]),
    ("ba", [(2, 3)]),
    ("Ab,bC->AC", [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_matches_torch(equation, shapes):
    arrays = [_randn(*s) for s in shapes]
    _check(lambda *x: mg.einsum(equation, *x), lambda *x: torch.einsum(equation, *x), *arrays)


def test_einsum_takes_its_operands_as_a_list():
    a, b = _randn(2, 3), _randn(3, 2)
    _check(lambda x, y: mg.einsum("ij,jk", [x, y]), lambda x, y: torch.einsum("ij,jk", [x, y]),
           a, b)


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk", [(2, 3)], "fewer operands were provided than specified in the equation"),
    ("ij", [(2, 3), (3, 2)], "more operands were provided than specified in the equation"),
    ("ij", [(2, 3, 4)], "does not match the number of dimensions"),
    ("ij->k", [(2, 3)], "output subscript k does not appear"),
    ("ij->ii", [(2, 3)], "output subscript appears more than once"),
    ("i,i", [(2,), (3,)], "operands do not broadcast"),
    ("i1", [(2, 3)], "subscripts must be in [a-zA-Z]"),
])
def test_einsum_errors_are_torchs(equation, shapes, message):
    arrays = [_randn(*s) for s in shapes]
    with pytest.raises(RuntimeError, match=re.escape(message)):
        mg.einsum(equation, *[mg.tensor(a) for a in arrays])
    with pytest.raises(RuntimeError):
        torch.einsum(equation, *[torch.tensor(a) for a in arrays])


@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
def test_tril_triu_match_torch(diagonal):
    a = _randn(2, 3, 4)
    _check(lambda x: mg.tril(x, diagonal), lambda x: torch.tril(x, diagonal), a)
    _check(lambda x: x.triu(diagonal), lambda x: x.triu(diagonal), a)


def test_tril_needs_a_matrix():
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dimensions"):
        mg.tril(mg.zeros(3))


def test_matrix_products_match_torch():
    x, b1, b2 = _randn(2, 3, 5), _randn(2, 3, 4), _randn(2, 4, 5)
    _check(mg.bmm, torch.bmm, b1, b2)
    _check(lambda i, p, q: mg.baddbmm(i, p, q, beta=0.5, alpha=-2.0),
           lambda i, p, q: torch.baddbmm(i, p, q, beta=0.5, alpha=-2.0), x, b1, b2)
    _check(lambda i, p, q: mg.baddbmm(i, p, q), lambda i, p, q: torch.baddbmm(i, p, q),
           _randn(5), b1, b2)
    m, m1, m2 = _randn(3, 5), _randn(3, 4), _randn(4, 5)
    _check(lambda i, p, q: mg.addmm(i, p, q, beta=2.0, alpha=0.5),
           lambda i, p, q: torch.addmm(i, p, q, beta=2.0, alpha=0.5), m, m1, m2)
    _check(lambda i, p, q: i.addmm(p, q), lambda i, p, q: i.addmm(p, q), _randn(1, 5), m1, m2)
    _check(mg.outer, torch.outer, _randn(3), _randn(4))


def test_beta_zero_ignores_the_input_even_its_nans():
    nan = np.full((3, 5), np.nan)
    m1, m2 = _randn(3, 4), _randn(4, 5)
    got = mg.addmm(mg.tensor(nan), mg.tensor(m1), mg.tensor(m2), beta=0)
    np.testing.assert_allclose(got.numpy(), m1 @ m2)


@pytest.mark.parametrize("call,message", [
    (lambda: mg.bmm(mg.zeros(2, 3), mg.zeros(2, 3, 4)), "batch1 must be a 3D tensor"),
    (lambda: mg.bmm(mg.zeros(2, 3, 4), mg.zeros(3, 4, 2)),
     "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [3, 4]."),
    (lambda: mg.addmm(mg.zeros(2), mg.zeros(2, 3), mg.zeros(2, 3)),
     "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"),
    (lambda: mg.outer(mg.zeros(2, 2), mg.zeros(2)), "outer: Expected 1-D argument self"),
])
def test_matrix_product_errors_are_torchs(call, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call()


def test_where_and_masked_fill_with_broadcast_masks_match_torch():
    scores = _randn(2, 3, 4, 4)
    causal = np.tril(np.ones((4, 4), dtype=bool))
    _check(lambda s: s.masked_fill(mg.tensor(~causal), float("-inf")).softmax(-1),
           lambda s: s.masked_fill(torch.tensor(~causal), float("-inf")).softmax(-1), scores)
    _check(lambda s: s.masked_fill(mg.tensor(~causal[None, None]), mg.tensor(-1.5)),
           lambda s: s.masked_fill(torch.tensor(~causal[None, None]), torch.tensor(-1.5)),
           scores)
    condition = _randn(3, 1) > 0
    _check(lambda a, b: mg.where(mg.tensor(condition), a, b),
           lambda a, b: torch.where(torch.tensor(condition), a, b), _randn(3, 4), _randn(4))
    _check(lambda a, b: a.where(mg.tensor(condition), b),
           lambda a, b: a.where(torch.tensor(condition), b), _randn(3, 4), _randn(3, 4))


def test_masked_fill_in_place_with_a_broadcast_mask():
    ours, theirs = mg.tensor(_randn(2, 4, 4)), None
    theirs = torch.tensor(ours.numpy().copy())
    mask = np.triu(np.ones((4, 4), dtype=bool), 1)
    ours.masked_fill_(mg.tensor(mask), 0.0)
    theirs.masked_fill_(torch.tensor(mask), 0.0)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatters_and_index_add_match_torch(dim):
    # src the size of the index: torch's own backward refuses a larger src.
    x, src = _randn(3, 4), _randn(2, 3)
    index = np.random.default_rng(dim + 5).permutation(12).reshape(3, 4) % x.shape[dim]
    index = np.sort(index, axis=dim)[:2, :3] if dim == 0 else index[:2, :3]
    # scatter's (write) gradient is defined only without repeated targets.
    unique = np.argsort(np.random.default_rng(1).random(x.shape), axis=dim)[:2, :3]
    _check(lambda a, s: a.scatter(dim, mg.tensor(unique), s),
           lambda a, s: a.scatter(dim, torch.tensor(unique), s), x, src)
    _check(lambda a: mg.scatter(a, dim, mg.tensor(unique), value=-3.0),
           lambda a: torch.scatter(a, dim, torch.tensor(unique), value=-3.0), x)
    _check(lambda a, s: a.scatter_add(dim, mg.tensor(index), s),
           lambda a, s: a.scatter_add(dim, torch.tensor(index), s), x, src)
    # torch computes reduce="add" as scatter_add but has no derivative for it; ours has
    # scatter_add's.
    _check(lambda a, s: mg.scatter(a, dim, mg.tensor(index), s, reduce="add"),
           lambda a, s: torch.scatter_add(a, dim, torch.tensor(index), s), x, src)
    positions = np.array([2, 0, 2, 1, 0])
    source = _randn(*[5 if d == dim % 2 else x.shape[d] for d in range(2)])
    _check(lambda a, s: a.index_add(dim, mg.tensor(positions[:source.shape[dim]]), s, alpha=2),
           lambda a, s: a.index_add(dim, torch.tensor(positions[:source.shape[dim]]), s,
                                    alpha=2), x, source)


def test_in_place_scatters_match_torch():
    index = np.array([[0, 2], [1, 1]])
    for method, args in (("scatter_", (1, index, _randn(2, 2))),
                         ("scatter_add_", (1, index, _randn(2, 2))),
                         ("index_add_", (0, np.array([1, 1]), _randn(2, 3)))):
        base = _randn(2, 3)
        ours, theirs = mg.tensor(base.copy()), torch.tensor(base.copy())
        getattr(ours, method)(args[0], mg.tensor(args[1]), mg.tensor(args[2]))
        getattr(theirs, method)(args[0], torch.tensor(args[1]), torch.tensor(args[2]))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("call,message", [
    (lambda: mg.zeros(2, 3).scatter(1, mg.tensor([[0, 1]], dtype=mg.int32), mg.zeros(1, 2)),
     "scatter(): Expected dtype int64 for index"),
    (lambda: mg.zeros(2, 3).scatter(1, mg.tensor([0, 1]), mg.zeros(2)),
     "Index tensor must have the same number of dimensions as self tensor"),
    (lambda: mg.zeros(2, 3).scatter(1, mg.tensor([[0, 5]]), mg.zeros(1, 2)),
     "index 5 is out of bounds for dimension 1 with size 3"),
    (lambda: mg.zeros(2, 3).scatter_add(1, mg.tensor([[0, 1]]), mg.zeros(1, 2, dtype=mg.float64)),
     "scatter_add(): Expected self.dtype to be equal to src.dtype"),
    (lambda: mg.zeros(2, 3).index_add(0, mg.tensor([0, 1, 1]), mg.zeros(2, 3)),
     "index_add_(): Number of indices (3) should be equal to source.size(dim) (2)"),
])
def test_scatter_errors_are_torchs(call, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call()


def test_roll_flip_repeat_interleave_match_torch():
    a = _randn(3, 4, 2)
    _check(lambda x: mg.roll(x, (1, -5), (0, 1)), lambda x: torch.roll(x, (1, -5), (0, 1)), a)
    _check(lambda x: x.roll(7), lambda x: x.roll(7), a)
    _check(lambda x: mg.flip(x, (0, -1)), lambda x: torch.flip(x, (0, -1)), a)
    _check(lambda x: x.flip(1), lambda x: x.flip(1), a)
    _check(lambda x: x.repeat_interleave(2), lambda x: x.repeat_interleave(2), a)
    _check(lambda x: mg.repeat_interleave(x, mg.tensor([2, 0, 1, 3]), dim=1),
           lambda x: torch.repeat_interleave(x, torch.tensor([2, 0, 1, 3]), dim=1), a)
    counts = np.array([1, 0, 3])
    np.testing.assert_array_equal(mg.repeat_interleave(mg.tensor(counts)).numpy(),
                                  torch.repeat_interleave(torch.tensor(counts)).numpy())
    with pytest.raises(RuntimeError, match="repeats must have the same size as input"):
        mg.repeat_interleave(mg.zeros(3), mg.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        mg.roll(mg.zeros(3, 2), (1, 2), 0)


def test_elementwise_additions_match_torch():
    a = np.abs(_randn(3, 4)) + 0.1
    _check(mg.rsqrt, torch.rsqrt, a)
    _check(lambda x: x.erf(), lambda x: x.erf(), _randn(3, 4))
    bad = np.array([1.0, np.nan, np.inf, -np.inf, -2.0])
    for kwargs in ({}, {"nan": 0.5, "posinf": 9.0, "neginf": -9.0}):
        _check(lambda x: mg.nan_to_num(x, **kwargs), lambda x: torch.nan_to_num(x, **kwargs),
               bad)
    assert mg.nan_to_num(mg.tensor(bad, dtype=mg.float32)).numpy()[2] == np.finfo(np.float32).max
    _check(lambda s, e, w: mg.lerp(s, e, w), lambda s, e, w: torch.lerp(s, e, w), _randn(3),
           _randn(3), _randn(3))
    _check(lambda s, e: mg.lerp(s, e, 0.75), lambda s, e: torch.lerp(s, e, 0.75), _randn(3),
           _randn(2, 3))


def test_broadcast_to_meshgrid_and_small_functions_match_torch():
    _check(lambda x: mg.broadcast_to(x, (2, 3, 4)), lambda x: torch.broadcast_to(x, (2, 3, 4)),
           _randn(3, 1))
    for indexing in ("ij", "xy"):
        for k in range(3):
            _check(lambda a, b, c: mg.meshgrid(a, b, c, indexing=indexing)[k],
                   lambda a, b, c: torch.meshgrid(a, b, c, indexing=indexing)[k],
                   _randn(2), _randn(3), _randn(4))
    with pytest.warns(UserWarning, match="it will be required to pass the indexing argument"):
        mg.meshgrid(mg.zeros(2), mg.zeros(3))
    a = _randn(3, 2)
    for other in (a + 1e-9, a + 1e-3, np.where(a > 0, np.nan, a)):
        for kwargs in ({}, {"equal_nan": True}, {"rtol": 0, "atol": 1e-2}):
            assert mg.allclose(mg.tensor(a), mg.tensor(other), **kwargs) == torch.allclose(
                torch.tensor(a), torch.tensor(other), **kwargs)
    assert mg.is_tensor(mg.zeros(1)) and not mg.is_tensor(np.zeros(1))
    assert mg.numel(mg.zeros(2, 3)) == mg.zeros(2, 3).nelement() == 6


def test_multinomial_draws_follow_the_weights_with_and_without_replacement():
    weights = np.array([[0.1, 0.0, 0.6, 0.3], [5.0, 1.0, 0.0, 4.0]])
    generator = mg.Generator().manual_seed(3)
    draws = mg.multinomial(mg.tensor(weights), 20000, replacement=True, generator=generator)
    assert draws.dtype == np.int64 and draws.shape == (2, 20000)
    for row, w in zip(draws.numpy(), weights):
        frequencies = np.bincount(row, minlength=4) / row.size
        # 20,000 draws: a standard error below 0.0035 per category; zero weights never drawn.
        np.testing.assert_allclose(frequencies, w / w.sum(), atol=0.02)
    without = mg.tensor(weights).multinomial(3, generator=mg.Generator().manual_seed(4))
    for row, w in zip(without.numpy(), weights):
        assert len(set(row)) == 3 and all(w[i] > 0 for i in row)
    # Without replacement, the first draw follows the weights too.
    firsts = np.bincount([mg.multinomial(mg.tensor(weights[0]), 1).item()
                          for _ in range(3000)], minlength=4) / 3000
    np.testing.assert_allclose(firsts, weights[0], atol=0.04)


def test_multinomial_repeats_with_a_seeded_generator():
    weights = mg.tensor([0.2, 0.3, 0.5])
    first = mg.multinomial(weights, 10, True, generator=mg.Generator().manual_seed(11))
    again = mg.multinomial(weights, 10, True, generator=mg.Generator().manual_seed(11))
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    mg.manual_seed(5)
    one = mg.multinomial(weights, 3)
    mg.manual_seed(5)
    np.testing.assert_array_equal(one.numpy(), mg.multinomial(weights, 3).numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_multinomial_draws_from_16_bit_weights_as_torch(dtype):
    """Found by tests/programs/gpt.py: sampling under bfloat16 autocast gives bfloat16
    probabilities, which torch draws from and mpigrad refused as not floating point."""
    one_hot = [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    ours = mg.multinomial(mg.tensor(one_hot, dtype=getattr(mg, dtype)), 1)
    theirs = torch.multinomial(torch.tensor(one_hot, dtype=getattr(torch, dtype)), 1)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours.dtype == np.int64
    draws = mg.tensor([0.25, 0.75], dtype=getattr(mg, dtype)).multinomial(
        4000, replacement=True, generator=mg.Generator().manual_seed(1))
    np.testing.assert_allclose(np.bincount(draws.numpy()) / 4000, [0.25, 0.75], atol=0.03)
    with pytest.raises(RuntimeError, match="got: Long"):
        mg.multinomial(mg.tensor([1, 2]), 1)


@pytest.mark.parametrize("weights,samples,replacement,message", [
    ([0.5, -0.1], 1, True, "probability tensor contains either `inf`, `nan` or element < 0"),
    ([0.5, np.nan], 1, True, "probability tensor contains either `inf`, `nan` or element < 0"),
    ([0.0, 0.0], 1, True, "invalid multinomial distribution (sum of probabilities <= 0)"),
    ([0.5, 0.5], 3, False, "cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement"),
    ([[[0.5]]], 1, True, "prob_dist must be 1 or 2 dim"),
])
def test_multinomial_errors_are_torchs(weights, samples, replacement, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        mg.multinomial(mg.tensor(np.array(weights)), samples, replacement)
    with warnings.catch_warnings(), pytest.raises(RuntimeError):
        warnings.simplefilter("ignore")
        torch.multinomial(torch.tensor(np.array(weights)), samples, replacement)


def test_multinomial_draws_zero_weights_last_without_replacement():
    """torch's CPU kernel, once the positive categories run out, returns the zero-weight
    ones (`multinomial([1., 0., 2.], 3)` is [2, 0, 1] or [0, 2, 1]); WeightedRandomSampler
    with zero weights and replacement=False relies on it."""
    weights = [[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 1.0, 0.0]]
    theirs = torch.multinomial(torch.tensor(weights, dtype=torch.float64), 4).numpy()
    generator = mg.Generator().manual_seed(3)
    for _ in range(20):
        ours = mg.multinomial(mg.tensor(weights, dtype=mg.float64), 4, generator=generator)
        assert ours.dtype == np.int64
        for row, our_row, their_row in zip(weights, ours.numpy(), theirs):
            positive = np.count_nonzero(row)
            for picks in (our_row, their_row):
                assert sorted(picks) == [0, 1, 2, 3]
                assert all(row[i] > 0 for i in picks[:positive])
                assert all(row[i] == 0 for i in picks[positive:])


@pytest.mark.parametrize("reduce", [
    lambda t: t.sum(0), lambda t: t.mean(-1, keepdim=True), lambda t: t.amax(0),
    lambda t: t.amin(-1), lambda t: t.var(0), lambda t: t.std(0, correction=0),
    lambda t: t.logsumexp(0), lambda t: t.max(0)[0], lambda t: t.min(-1)[0],
], ids=["sum", "mean", "amax", "amin", "var", "std", "logsumexp", "max", "min"])
def test_reductions_over_a_0d_tensors_one_dim_match_torch(reduce):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # var's degrees of freedom warning, in both
        _check(reduce, reduce, np.array(1.5))


@pytest.mark.parametrize("reduce", [lambda t: t.sum(dim=[]), lambda t: t.mean(dim=()),
                                    lambda t: t.amax(dim=[]), lambda t: t.amin(dim=())],
                         ids=["sum", "mean", "amax", "amin"])
def test_an_empty_dim_list_reduces_every_dimension_as_torch(reduce):
    _check(reduce, reduce, rng.standard_normal((3, 4)))


def test_std_of_a_constant_slice_has_torchs_zero_gradient():
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    _check(lambda t: t.std(1), lambda t: t.std(1), x)
    _check(lambda t: t.std(), lambda t: t.std(), np.full((2, 2), 3.0))
    assert (mg.tensor(0.5, requires_grad=True).max(0)[1] ==
            torch.tensor(0.5).max(0)[1].item())
