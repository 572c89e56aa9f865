"""Sparse COO tensors and Embedding(sparse=True)'s gradient, against torch: indices, values,
coalescing, accumulation over backward passes, and the errors torch raises."""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn

torch = pytest.importorskip("torch")


def _same(mine, theirs, exact=True):
    """The same sparse tensor: layout, size, dtype, coalesced flag, indices and values as
    stored (order and repeats included)."""
    assert mine.is_sparse and theirs.is_sparse
    assert mine.layout is mg.sparse_coo and str(mine.layout) == str(theirs.layout)
    assert tuple(mine.shape) == tuple(theirs.shape)
    assert mine.dtype == np.dtype(str(theirs.dtype).split(".")[1])
    assert mine.is_coalesced() == theirs.is_coalesced()
    np.testing.assert_array_equal(mine._indices().numpy(), theirs._indices().numpy())
    if exact:
        np.testing.assert_array_equal(mine._values().numpy(), theirs._values().numpy())
    else:
        np.testing.assert_allclose(mine._values().numpy(), theirs._values().numpy(), rtol=1e-6)


def _pair(num, dim, dtype=np.float64, **kwargs):
    """An mpigrad Embedding(sparse=True) and a torch one with the same weight."""
    mine = nn.Embedding(num, dim, dtype=dtype, sparse=True, **kwargs)
    theirs = torch.nn.Embedding(num, dim, dtype=getattr(torch, np.dtype(dtype).name),
                                sparse=True, **kwargs)
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(mine.weight.detach().numpy().copy()))
    return mine, theirs


@pytest.mark.parametrize("padding_idx", [None, 1, -1])
def test_embedding_sparse_gradient_and_its_accumulation_are_torchs(padding_idx):
    mine, theirs = _pair(6, 3, padding_idx=padding_idx)
    batches = [[[0, 2, 1], [2, 5, 0]], [3, 0, 5], [4]]
    for batch in batches:
        (mine(mg.tensor(batch)) ** 2).sum().backward()
        (theirs(torch.tensor(batch)) ** 2).sum().backward()
        # The first backward's gradient, then torch's uncoalesced sums of the next ones.
        _same(mine.weight.grad, theirs.weight.grad)
    assert type(mine(mg.tensor([1])).grad_fn).__name__ == "EmbeddingBackward0"
    coalesced, reference = mine.weight.grad.coalesce(), theirs.weight.grad.coalesce()
    _same(coalesced, reference)
    np.testing.assert_array_equal(coalesced.indices().numpy(), reference.indices().numpy())
    np.testing.assert_array_equal(mine.weight.grad.to_dense().numpy(),
                                  theirs.weight.grad.to_dense().numpy())


def test_a_weight_used_twice_or_also_densely_sums_as_torch():
    mine, theirs = _pair(5, 2)
    for e, lib in ((mine, mg), (theirs, torch)):
        (e(lib.tensor([2, 1])).sum() + (e(lib.tensor([3, 2])) * 3).sum()).backward()
    _same(mine.weight.grad, theirs.weight.grad)
    for e, lib in ((mine, mg), (theirs, torch)):
        e.weight.grad = None
        (e(lib.tensor([2, 1])).sum() + (e.weight * 2).sum()).backward()
        (e(lib.tensor([4])).sum()).backward()  # dense .grad += sparse
    assert not mine.weight.grad.is_sparse and not theirs.weight.grad.is_sparse
    np.testing.assert_array_equal(mine.weight.grad.numpy(), theirs.weight.grad.numpy())
    for e, lib in ((mine, mg), (theirs, torch)):
        e.weight.grad = None
        e(lib.tensor([2, 1])).sum().backward()
        (e.weight * 2).sum().backward()  # sparse .grad then a dense one: dense
    assert not mine.weight.grad.is_sparse
    np.testing.assert_array_equal(mine.weight.grad.numpy(), theirs.weight.grad.numpy())


def test_a_lookup_of_padding_only_gives_an_empty_coalesced_gradient():
    mine, theirs = _pair(4, 2, padding_idx=0)
    mine(mg.tensor([0, 0])).sum().backward()
    theirs(torch.tensor([0, 0])).sum().backward()
    _same(mine.weight.grad, theirs.weight.grad)
    assert mine.weight.grad._values().shape == (0, 2)


def test_functional_embedding_sparse_with_max_norm_and_the_refusals():
    weight = mg.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    reference = torch.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    nn.functional.embedding(mg.tensor([3, 1, 3]), weight, max_norm=2.0, sparse=True).sum() \
        .backward()
    torch.nn.functional.embedding(torch.tensor([3, 1, 3]), reference, max_norm=2.0,
                                  sparse=True).sum().backward()
    _same(weight.grad, reference.grad)
    np.testing.assert_allclose(weight.detach().numpy(), reference.detach().numpy(), rtol=1e-12)
    for lib, f in ((mg, nn.functional), (torch, torch.nn.functional)):
        w = lib.ones(4, 2, requires_grad=True)
        with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported with sparse"):
            f.embedding(lib.tensor([1, 1]), w, scale_grad_by_freq=True, sparse=True).sum() \
                .backward()


def test_sparse_coo_tensor_is_torchs_constructor():
    indices, values = [[0, 2, 0]], [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    mine, theirs = mg.sparse_coo_tensor(indices, values, (4, 2)), \
        torch.sparse_coo_tensor(indices, values, (4, 2))
    _same(mine, theirs)
    assert mine.sparse_dim() == theirs.sparse_dim() and mine.dense_dim() == theirs.dense_dim()
    assert mine._nnz() == theirs._nnz() and mine.requires_grad is False
    for args, kwargs in [(([[0, 1], [1, 0]], [1, 2], (2, 2)), {}),
                         (([[0, 1], [1, 0]], [1.0, 2.0]), {"dtype": mg.float64}),
                         (([[2, 0, 2]], [[1.0], [2.0], [3.0]]), {}),
                         (([[1]], [1.0], (3,)), {})]:
        theirs_kwargs = {k: getattr(torch, np.dtype(v).name) for k, v in kwargs.items()}
        _same(mg.sparse_coo_tensor(*args, **kwargs),
              torch.sparse_coo_tensor(*args, **theirs_kwargs))
    np.testing.assert_array_equal(mine.to_dense().numpy(), theirs.to_dense().numpy())
    assert mine.sum().item() == theirs.sum().item()
    _same(mine.to(mg.float64), theirs.to(torch.float64))
    _same(mine.double().coalesce(), theirs.double().coalesce())
    for bad in [(([[0, 1]], [1.0, 2.0, 3.0], (4,)), "indices and values must have same nnz"),
                (([[2, 0, 2]], [[1.0], [2.0], [3.0]], (3,)), "len\\(size\\) == sparse_dim"),
                (([[2, 0, 2]], [[1.0], [2.0], [3.0]], (3, 4)), "values has incorrect size"),
                (([2, 0, 1], [1.0, 2.0, 3.0], (3,)), "len\\(size\\) == sparse_dim")]:
        args, match = bad
        for lib in (mg, torch):
            with pytest.raises(RuntimeError, match=match):
                lib.sparse_coo_tensor(*args)
    # Indices outside size: torch checks them with check_invariants=True; mpigrad always.
    for args, match in [(([[2, 0, 5]], [1.0, 2.0, 3.0], (3,)), "for dim 0, size is 3 but found "
                                                                 "index 5"),
                        (([[2, 0, -1]], [1.0, 2.0, 3.0], (3,)), "found negative index -1")]:
        with pytest.raises(RuntimeError, match=match):
            mg.sparse_coo_tensor(*args)
        with pytest.raises(RuntimeError, match=match):
            torch.sparse_coo_tensor(*args, check_invariants=True)


@pytest.mark.parametrize("left, right", [
    ([[0, 2]], [[2, 1]]),            # uncoalesced + uncoalesced: torch's one-pass merge
    ([[0, 2, 2, 4, 0]], [[3, 0]]),
    ([[4, 4, 1]], [[1, 4, 0, 0]]),
])
@pytest.mark.parametrize("coalesce", [False, True])
def test_sparse_arithmetic_is_torchs(left, right, coalesce):
    def build(lib, indices):
        values = np.arange(1.0, len(indices[0]) * 2 + 1).reshape(-1, 2) / 3
        s = lib.sparse_coo_tensor(indices, values.tolist(), (5, 2))
        return s.coalesce() if coalesce else s
    for op in (lambda a, b: a + b, lambda a, b: a.add(b, alpha=2.5),
               lambda a, b: a.clone().add_(b), lambda a, b: (a * 3) + (-b),
               lambda a, b: a / 4, lambda a, b: a.clone().mul_(2).add_(b, alpha=0.5)):
        _same(op(build(mg, left), build(mg, right)), op(build(torch, left), build(torch, right)),
              exact=False)
    dense = np.arange(10.0).reshape(5, 2)
    np.testing.assert_allclose((mg.tensor(dense) + build(mg, left)).numpy(),
                               (torch.tensor(dense) + build(torch, left)).numpy(), rtol=1e-15)
    mine, theirs = build(mg, left), build(torch, left)
    mine.zero_(), theirs.zero_()
    _same(mine, theirs)


def test_what_sparse_tensors_refuse_is_torchs_error_type():
    for lib in (mg, torch):
        s = lib.sparse_coo_tensor([[0, 2, 0]], [1.0, 2.0, 3.0], (4,))
        with pytest.raises(RuntimeError, match="add\\(sparse, dense\\) is not supported"):
            s + lib.ones(4)
        with pytest.raises(RuntimeError, match="Cannot get indices on an uncoalesced tensor"):
            s.indices()
        with pytest.raises(RuntimeError, match="Cannot get values on an uncoalesced tensor"):
            s.values()
        with pytest.raises(RuntimeError, match="add: expected sizes"):
            s + lib.sparse_coo_tensor([[0]], [1.0], (5,))
        with pytest.raises(TypeError, match="can't convert Sparse layout tensor to numpy"):
            s.numpy()
        with pytest.raises(NotImplementedError):  # a dense-only op
            s.exp()
    assert mg.ones(2).layout is mg.strided and not mg.ones(2).is_sparse
