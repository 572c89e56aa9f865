"""torch functions programs call that mpigrad lacked until 2026-11-29: argsort, nonzero,
argwhere, count_nonzero, masked_select, tile, movedim/moveaxis, swapaxes/swapdims, unflatten,
dot, mv, isclose, equal; tensor_split, hsplit, vsplit, split_with_sizes, take, trace, aminmax,
nansum, nanmean; and the layout queries storage_offset, data_ptr, nbytes, itemsize. Each
against torch: values and dtype, the gradient, the node's name and the tangent where one
flows, and the errors torch raises for bad input."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")

DATA = np.array([[0.0, 1.5, -2.0, 0.0], [3.0, 0.0, 1.5, -1.0], [0.5, 2.5, 0.0, 4.0]])


def _both(function, *arrays, grad=True):
    """function on mpigrad and torch tensors of `arrays`; the outputs, and with `grad` the
    first input's gradient of the output's sum times a fixed weight."""
    results = []
    for lib in (mg, torch):
        inputs = [lib.tensor(a, requires_grad=grad and a.dtype.kind == "f" and i == 0)
                  for i, a in enumerate(arrays)]
        out = function(lib, *inputs)
        gradient = None
        if grad:
            weight = lib.tensor(np.linspace(-1.0, 2.0, out.numel()).reshape(tuple(out.shape)))
            (out * weight).sum().backward()
            gradient = inputs[0].grad.numpy()
        results.append((out, gradient))
    return results


def _same(ours, theirs):
    ours_array = ours.detach().numpy() if hasattr(ours, "detach") else np.asarray(ours)
    theirs_array = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    assert ours_array.dtype == theirs_array.dtype
    np.testing.assert_array_equal(ours_array, theirs_array)


@pytest.mark.parametrize("name,function", [
    ("tile-fewer-dims", lambda L, x: L.tile(x, (2,))),
    ("tile-more-dims", lambda L, x: L.tile(x, (2, 1, 3))),
    ("tile-method", lambda L, x: x.tile(1, 2)),
    ("movedim", lambda L, x: L.movedim(x.reshape(3, 2, 2), 0, -1)),
    ("movedim-tuples", lambda L, x: L.movedim(x.reshape(3, 2, 2), (0, 2), (2, 0))),
    ("moveaxis", lambda L, x: L.moveaxis(x.reshape(3, 2, 2), 1, 0)),
    ("swapaxes", lambda L, x: L.swapaxes(x, 0, 1)),
    ("swapdims-method", lambda L, x: x.swapdims(-1, 0)),
    ("unflatten", lambda L, x: x.unflatten(1, (2, 2))),
    ("unflatten-inferred", lambda L, x: L.unflatten(x, -1, (-1, 1))),
    ("masked_select", lambda L, x: L.masked_select(x, x > 0.7)),
    ("masked_select-broadcast", lambda L, x: x.masked_select(L.tensor([True, False, True, True]))),
    ("dot", lambda L, x: L.dot(x[0], x[1])),
    ("mv", lambda L, x: L.mv(x, x[1])),
])
def test_differentiable_functions_match_torch(name, function):
    (ours, ours_grad), (theirs, theirs_grad) = _both(function, DATA)
    _same(ours, theirs)
    # A tile's gradient adds its copies, in an order of the library's own.
    np.testing.assert_allclose(ours_grad, theirs_grad, rtol=1e-15, atol=1e-15)
    assert type(ours.grad_fn).__name__ == type(theirs.grad_fn).__name__


@pytest.mark.parametrize("name,function", [
    ("argsort", lambda L, x: L.argsort(x)),
    ("argsort-descending-dim0", lambda L, x: x.argsort(dim=0, descending=True)),
    ("argsort-stable", lambda L, x: L.argsort(x, stable=True)),
    ("nonzero", lambda L, x: L.nonzero(x)),
    ("argwhere", lambda L, x: x.argwhere()),
    ("count_nonzero", lambda L, x: L.count_nonzero(x)),
    ("count_nonzero-dim", lambda L, x: x.count_nonzero(dim=1)),
    ("count_nonzero-dims", lambda L, x: L.count_nonzero(x, dim=(0, 1))),
    ("isclose", lambda L, x: L.isclose(x, x + 1e-6)),
    ("isclose-tolerances", lambda L, x: x.isclose(x * 1.1, rtol=0.05, atol=0.2)),
])
def test_index_and_comparison_functions_match_torch(name, function):
    (ours, _), (theirs, _) = _both(function, DATA, grad=False)
    _same(ours, theirs)


def test_nonzero_as_tuple_and_of_a_scalar():
    for data in (DATA, np.array(2.0), np.array(0.0), np.zeros((2, 0))):
        ours = mg.nonzero(mg.tensor(data), as_tuple=True)
        theirs = torch.nonzero(torch.tensor(data), as_tuple=True)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b)
        _same(mg.tensor(data).nonzero(), torch.tensor(data).nonzero())


def test_isclose_treats_infinities_and_nans_as_torch():
    data = np.array([np.inf, -np.inf, np.nan, 1.0])
    other = np.array([np.inf, np.inf, np.nan, 1.0 + 1e-9])
    for equal_nan in (False, True):
        _same(mg.isclose(mg.tensor(data), mg.tensor(other), equal_nan=equal_nan),
              torch.isclose(torch.tensor(data), torch.tensor(other), equal_nan=equal_nan))


def test_equal_compares_shape_and_values_across_dtypes():
    a = DATA
    for other in (DATA.copy(), DATA.astype(np.float32), DATA[:2], DATA + 1):
        assert mg.equal(mg.tensor(a), mg.tensor(other)) == \
            torch.equal(torch.tensor(a), torch.tensor(other))
    assert mg.tensor(a).equal(mg.tensor(a.copy()))


@pytest.mark.parametrize("call,error,message", [
    (lambda L: L.dot(L.ones(3), L.ones(2)), RuntimeError, "inconsistent tensor size"),
    (lambda L: L.dot(L.ones(1, 3), L.ones(3)), RuntimeError, "1D tensors expected"),
    (lambda L: L.dot(L.ones(3), L.ones(3, dtype=L.float64)), RuntimeError, "same dtype"),
    (lambda L: L.mv(L.ones(3), L.ones(3)), RuntimeError, "vector \\+ matrix @ vector expected"),
    (lambda L: L.mv(L.ones(2, 3), L.ones(2)), RuntimeError, "size mismatch"),
    (lambda L: L.movedim(L.ones(2, 3, 4), (0, 0), (1, 2)), RuntimeError, "repeated dim"),
    (lambda L: L.movedim(L.ones(2, 3, 4), 0, 3), IndexError, "Dimension out of range"),
    (lambda L: L.ones(2, 6).unflatten(1, (4, -1)), RuntimeError, "don't multiply up"),
    (lambda L: L.masked_select(L.ones(3), L.tensor([1, 0, 1])), RuntimeError,
     "expected BoolTensor for mask"),
    (lambda L: L.isclose(L.ones(3), L.ones(3, dtype=L.float64)), RuntimeError,
     "Float did not match Double"),
])
def test_bad_input_raises_torch_s_error(call, error, message):
    for lib in (mg, torch):
        with pytest.raises(error, match=message):
            call(lib)


@pytest.mark.parametrize("function", [
    lambda L, x: L.tile(x, (2, 1, 3)), lambda L, x: L.movedim(x.reshape(3, 2, 2), (0, 2), (2, 0)),
    lambda L, x: x.unflatten(1, (2, 2)), lambda L, x: L.masked_select(x, x > 0.7),
    lambda L, x: L.dot(x[0], x[1]), lambda L, x: L.mv(x, x[1])],
    ids=["tile", "movedim", "unflatten", "masked_select", "dot", "mv"])
def test_tangents_match_torch(function):
    tangent = np.linspace(0.5, -1.5, DATA.size).reshape(DATA.shape)
    results = []
    for lib in (mg, torch):
        forward_ad = lib.autograd.forward_ad
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(lib.tensor(DATA), lib.tensor(tangent))
            results.append(forward_ad.unpack_dual(function(lib, dual)).tangent.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=1e-12)


NANS = np.array([[np.nan, 1.5, -2.0], [3.0, np.nan, np.nan]])


@pytest.mark.parametrize("name,function,data", [
    ("tensor_split-sections", lambda L, x: L.tensor_split(x, 3, dim=1)[0], DATA),
    ("tensor_split-last", lambda L, x: x.tensor_split(3, dim=1)[2], DATA),
    ("tensor_split-indices", lambda L, x: L.tensor_split(x, [1, 3], dim=1)[1], DATA),
    ("hsplit", lambda L, x: L.hsplit(x, 2)[1], DATA),
    ("hsplit-indices", lambda L, x: x.hsplit([3])[0], DATA),
    ("vsplit", lambda L, x: L.vsplit(x, [1])[1], DATA),
    ("split_with_sizes", lambda L, x: x.split_with_sizes([1, 3], 1)[1], DATA),
    ("take", lambda L, x: L.take(x, L.tensor([[0, 5], [-1, 6]])), DATA),
    ("trace", lambda L, x: L.trace(x), DATA),
    ("aminmax-min", lambda L, x: L.aminmax(x).min, DATA),
    ("aminmax-max-dim", lambda L, x: x.aminmax(dim=1, keepdim=True).max, DATA),
    ("nansum", lambda L, x: L.nansum(x), NANS),
    ("nansum-dim", lambda L, x: x.nansum(dim=0, keepdim=True), NANS),
    ("nanmean", lambda L, x: L.nanmean(x, dim=1), NANS),
])
def test_splits_and_reductions_match_torch(name, function, data):
    (ours, ours_grad), (theirs, theirs_grad) = _both(function, data)
    _same(ours, theirs)
    np.testing.assert_allclose(ours_grad, theirs_grad, rtol=1e-15, atol=1e-15)
    assert type(ours.grad_fn).__name__ == type(theirs.grad_fn).__name__


def test_reductions_keep_torch_s_dtypes():
    for data in (NANS.astype(np.float32), np.arange(6, dtype=np.int32).reshape(2, 3)):
        for name in ("nansum", "trace"):
            ours = getattr(mg, name)(mg.tensor(data))
            theirs = getattr(torch, name)(torch.tensor(data))
            _same(ours, theirs)
    _same(mg.nanmean(mg.tensor(NANS.astype(np.float32))),
          torch.nanmean(torch.tensor(NANS.astype(np.float32))))


def test_layout_queries_match_torch():
    base = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    for view in (lambda t: t, lambda t: t[1:, 2:], lambda t: t.t()[3], lambda t: t[::2, 1]):
        ours, theirs = view(mg.tensor(base)), view(torch.tensor(base))
        assert ours.storage_offset() == theirs.storage_offset()
        assert (ours.nbytes, ours.itemsize) == (theirs.nbytes, theirs.itemsize)
    ours = mg.tensor(base)
    assert ours[1:].data_ptr() - ours.data_ptr() == 6 * 4
    for dtype in (np.float32, np.int64, np.uint8, np.bool_):
        zeros = np.zeros(2, dtype)
        assert mg.tensor(zeros).is_signed() == torch.tensor(zeros).is_signed()
    assert not mg.tensor(base).is_complex()


@pytest.mark.parametrize("call,error,message", [
    (lambda L: L.tensor_split(L.ones(4), 0), RuntimeError, "number of sections must be larger"),
    (lambda L: L.hsplit(L.ones(2, 5), 2), RuntimeError, "not divisible by the split_size 2"),
    (lambda L: L.vsplit(L.ones(3), 1), RuntimeError, "at least 2 dimension"),
    (lambda L: L.take(L.ones(2, 5), L.tensor([10])), IndexError, "tried to access index 10"),
    (lambda L: L.trace(L.ones(3)), RuntimeError, "expected a matrix"),
    (lambda L: L.nanmean(L.tensor([1, 2])), RuntimeError, "floating point or complex dtype"),
    (lambda L: L.aminmax(L.ones(0)), RuntimeError, "cannot compute aminmax over an empty"),
])
def test_bad_splits_and_reductions_raise_torch_s_error(call, error, message):
    for lib in (mg, torch):
        with pytest.raises(error, match=message):
            call(lib)
