"""The smaller pieces transformers use, against torch in float64: RMSNorm, LayerNorm without
bias, Embedding's padding_idx and max_norm, one_hot, normalize, cosine_similarity, and the
ParameterList / ParameterDict containers."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F
from mpigrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = dict(rtol=1e-10, atol=1e-10)


def _both(array):
    return mg.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)


def _check(ours_fn, theirs_fn, arrays, rng):
    """Same function of the same inputs in both libraries: value and input gradients."""
    pairs = [_both(a) for a in arrays]
    out = ours_fn(*(a for a, _ in pairs))
    expected = theirs_fn(*(b for _, b in pairs))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), **TOL)
    seed = rng.standard_normal(tuple(expected.shape))
    out.backward(mg.tensor(seed))
    expected.backward(torch.tensor(seed))
    for a, b in pairs:
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **TOL)


@pytest.mark.parametrize("shape,eps,affine", [(4, None, True), ((3, 4), 1e-3, True),
                                              (4, 1e-6, False)])
def test_rms_norm(rng, shape, eps, affine):
    ours = mg.nn.RMSNorm(shape, eps=eps, elementwise_affine=affine)
    theirs = torch.nn.RMSNorm(shape, eps=eps, elementwise_affine=affine).double()
    assert repr(ours) == repr(theirs)
    weight = rng.standard_normal(ours.normalized_shape)
    if affine:
        ours.load_state_dict({"weight": weight})
        theirs.load_state_dict({"weight": torch.tensor(weight)})
    _check(ours, theirs, [rng.standard_normal((2, 3, 4))], rng)
    if affine:
        np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), **TOL)


def test_rms_norm_functional_gradcheck_and_errors(rng):
    x = mg.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    w = mg.tensor(rng.standard_normal(3), requires_grad=True)
    assert gradcheck(lambda x, w: F.rms_norm(x, (3,), w), (x, w), check_forward_ad=True)
    assert gradgradcheck(lambda x, w: F.rms_norm(x, (3,), w, eps=1e-5), (x, w))
    for fn, lib in ((F.rms_norm, mg), (TF.rms_norm, torch)):
        with pytest.raises(RuntimeError, match=r"expected input with shape \[\*4\], but got "
                                               r"input of size\[2, 3\]"):
            fn(lib.ones(2, 3), (4,))


def test_layer_norm_without_bias(rng):
    ours, theirs = mg.nn.LayerNorm(4, bias=False), torch.nn.LayerNorm(4, bias=False).double()
    assert ours.bias is None and list(ours.state_dict()) == list(theirs.state_dict())
    weight = rng.standard_normal(4)
    ours.load_state_dict({"weight": weight})
    theirs.load_state_dict({"weight": torch.tensor(weight)})
    _check(ours, theirs, [rng.standard_normal((3, 4))], rng)


def test_embedding_padding_idx_gets_no_gradient(rng):
    weight = rng.standard_normal((6, 3))
    ours = mg.nn.Embedding(6, 3, padding_idx=-2)
    theirs = torch.nn.Embedding(6, 3, padding_idx=-2).double()
    for m in (ours, theirs):
        assert m.padding_idx == 4
    ours.load_state_dict({"weight": weight})
    theirs.load_state_dict({"weight": torch.tensor(weight)})
    index = np.array([[4, 1, 4], [0, 1, 5]])
    out, expected = ours(mg.tensor(index)), theirs(torch.tensor(index))
    seed = rng.standard_normal((2, 3, 3))
    out.backward(mg.tensor(seed))
    expected.backward(torch.tensor(seed))
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), **TOL)
    assert np.all(ours.weight.grad.numpy()[4] == 0)
    fresh = mg.nn.Embedding(5, 2, padding_idx=1)
    assert np.all(fresh.weight.detach().numpy()[1] == 0)


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalises_looked_up_rows_in_place(rng, norm_type):
    weight = rng.standard_normal((6, 4)) * 3
    ours = mg.nn.Embedding(6, 4, max_norm=1.5, norm_type=norm_type)
    theirs = torch.nn.Embedding(6, 4, max_norm=1.5, norm_type=norm_type).double()
    ours.load_state_dict({"weight": weight})
    theirs.load_state_dict({"weight": torch.tensor(weight)})
    index = np.array([0, 2, 2, 5])
    out, expected = ours(mg.tensor(index)), theirs(torch.tensor(index))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), **TOL)
    # Rows 0, 2 and 5 were rescaled in the weight itself; the others are untouched.
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(),
                               **TOL)
    np.testing.assert_array_equal(ours.weight.detach().numpy()[[1, 3, 4]], weight[[1, 3, 4]])
    seed = rng.standard_normal(out.shape)
    out.backward(mg.tensor(seed))
    expected.backward(torch.tensor(seed))
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), **TOL)


def test_one_hot():
    index = np.array([[0, 3], [2, 1]])
    for classes in (-1, 5):
        ours = F.one_hot(mg.tensor(index), classes)
        theirs = TF.one_hot(torch.tensor(index), classes)
        assert ours.dtype == mg.int64
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1), (float("inf"), 1)])
def test_normalize(rng, p, dim):
    x = rng.standard_normal((3, 4))
    x[1] = 0  # a zero vector: the eps clamp keeps it zero, with torch's gradient
    _check(lambda a: F.normalize(a, p=p, dim=dim), lambda a: TF.normalize(a, p=p, dim=dim),
           [x], rng)


def test_normalize_errors():
    for fn, lib in ((F.normalize, mg), (TF.normalize, torch)):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range "
                                             r"of \[-2, 1\], but got 3\)"):
            fn(lib.ones(2, 3), dim=3)


@pytest.mark.parametrize("shapes,dim", [([(3, 4), (3, 4)], 1), ([(3, 1, 4), (5, 4)], -1),
                                        ([(2, 3), (2, 3)], 0)])
def test_cosine_similarity(rng, shapes, dim):
    _check(lambda a, b: F.cosine_similarity(a, b, dim=dim),
           lambda a, b: TF.cosine_similarity(a, b, dim=dim),
           [rng.standard_normal(s) for s in shapes], rng)


def test_cosine_similarity_of_a_tiny_vector_as_torch(rng):
    # Its norm is below eps: the value uses eps, the gradient the true norm (torch's rule).
    tiny = np.array([[1e-9, 2e-9, 0.0], [1.0, 2.0, 3.0]])
    _check(F.cosine_similarity, TF.cosine_similarity, [tiny, rng.standard_normal((2, 3))], rng)


def test_cosine_similarity_errors():
    with pytest.raises(RuntimeError):
        F.cosine_similarity(mg.ones(3, 4), mg.ones(3, 5))
    with pytest.raises(RuntimeError):
        TF.cosine_similarity(torch.ones(3, 4), torch.ones(3, 5))


# ----------------------------------------------------------------------------- containers
def test_parameter_list_as_torch():
    arrays = [np.ones(2), np.zeros(3), np.full((2, 2), 3.0)]
    ours = mg.nn.ParameterList([mg.nn.Parameter(mg.tensor(arrays[0])), mg.tensor(arrays[1])])
    theirs = torch.nn.ParameterList([torch.nn.Parameter(torch.tensor(arrays[0])),
                                     torch.tensor(arrays[1])])
    ours.append(mg.tensor(arrays[2]))
    theirs.append(torch.tensor(arrays[2]))
    assert len(ours) == len(theirs) == 3
    assert all(isinstance(p, mg.nn.Parameter) for p in ours)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["0", "1", "2"]
    assert ours[-1] is list(ours)[2]
    assert [tuple(p.shape) for p in ours[1:]] == [(3,), (2, 2)]
    ours[0] = mg.zeros(4)
    assert tuple(ours[0].shape) == (4,) and isinstance(ours[0], mg.nn.Parameter)
    outer = mg.nn.Module()
    outer.params = ours
    assert [n for n, _ in outer.named_parameters()] == ["params.0", "params.1", "params.2"]
    with pytest.raises(IndexError):
        ours[3]
    with pytest.raises(IndexError):
        theirs[3]
    loaded = mg.nn.ParameterList([mg.zeros(2), mg.zeros(3), mg.zeros(2, 2)])
    loaded.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    np.testing.assert_array_equal(loaded[2].detach().numpy(), arrays[2])


def test_parameter_dict_as_torch():
    ours = mg.nn.ParameterDict({"b": mg.ones(2), "a": mg.nn.Parameter(mg.zeros(1))})
    theirs = torch.nn.ParameterDict({"b": torch.ones(2), "a": torch.nn.Parameter(torch.zeros(1))})
    ours["c"] = mg.ones(3)
    theirs["c"] = torch.ones(3)
    assert list(ours) == list(theirs) == ["a", "b", "c"]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert all(isinstance(p, mg.nn.Parameter) for p in ours.values())
    assert "a" in ours and "z" not in ours and len(ours) == 3
    assert [k for k, _ in ours.items()] == list(ours.keys())
    assert ours.get("z") is None
    with pytest.raises(AttributeError):
        ours["z"]
    with pytest.raises(AttributeError):
        theirs["z"]
    popped = ours.pop("a")
    assert tuple(popped.shape) == (1,) and list(ours) == ["b", "c"]
    assert [n for n, _ in ours.named_parameters()] == ["b", "c"]
    ours.update({"d": mg.zeros(2)})
    assert ours.popitem()[0] == "d"
    copied = ours.copy()
    assert list(copied) == ["b", "c"] and copied["b"] is ours["b"]
    ours.clear()
    assert len(ours) == 0 and not list(ours.parameters())


def test_parameters_in_containers_train(rng):
    model = mg.nn.Module()
    model.scales = mg.nn.ParameterList([mg.ones(3), mg.ones(3)])
    model.shifts = mg.nn.ParameterDict({"x": mg.zeros(3)})
    optimizer = mg.optim.SGD(model.parameters(), lr=0.1)
    x = mg.tensor(rng.standard_normal(3))
    loss = ((x * model.scales[0] * model.scales[1] + model.shifts["x"]) ** 2).sum()
    loss.backward()
    optimizer.step()
    assert not np.allclose(model.scales[0].detach().numpy(), 1)
    assert not np.allclose(model.shifts["x"].detach().numpy(), 0)


def test_embedding_scale_grad_by_freq(rng):
    weight = rng.standard_normal((5, 3))
    ours = mg.nn.Embedding(5, 3, padding_idx=0, scale_grad_by_freq=True)
    theirs = torch.nn.Embedding(5, 3, padding_idx=0, scale_grad_by_freq=True).double()
    ours.load_state_dict({"weight": weight})
    theirs.load_state_dict({"weight": torch.tensor(weight)})
    index = np.array([[1, 1, 3], [1, 0, 3]])
    out, expected = ours(mg.tensor(index)), theirs(torch.tensor(index))
    np.testing.assert_array_equal(out.detach().numpy(), expected.detach().numpy())
    seed = rng.standard_normal(out.shape)
    out.backward(mg.tensor(seed))
    expected.backward(torch.tensor(seed))
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), **TOL)


def test_parameter_containers_print_as_torchs():
    """With torch's layout quirks: four spaces before a list's entries, and a lone entry of a
    dict on the container's own line."""
    for entries in ([], [np.ones(2)], [np.ones(2), np.zeros((2, 3), np.float32)]):
        assert repr(mg.nn.ParameterList([mg.tensor(e) for e in entries])) == repr(
            torch.nn.ParameterList([torch.tensor(e) for e in entries]))
    for entries in ({}, {"a": np.ones(2)}, {"a": np.ones((2, 2), np.float32), "b": 3}):
        def values(lib):
            return {k: lib.tensor(v) if isinstance(v, np.ndarray) else v
                    for k, v in entries.items()}
        assert repr(mg.nn.ParameterDict(values(mg))) == repr(
            torch.nn.ParameterDict(values(torch)))
