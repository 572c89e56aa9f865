"""Every torch.nn.init function: exact where it is deterministic, the same distribution's
properties where it draws, torch's errors for bad shapes."""
import math
import warnings

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.nn import init

torch = pytest.importorskip("torch")

def test_every_torch_init_function_exists():
    names = [n for n in dir(torch.nn.init) if not n.startswith("_")
             and callable(getattr(torch.nn.init, n)) and getattr(torch.nn.init, n).__module__
             == "torch.nn.init"]
    missing = [n for n in names if not hasattr(init, n)]
    assert not missing


@pytest.mark.parametrize("nonlinearity, param", [
    ("linear", None), ("conv1d", None), ("conv3d", None), ("conv_transpose2d", None),
    ("sigmoid", None), ("tanh", None), ("relu", None), ("leaky_relu", None),
    ("leaky_relu", 0.2), ("leaky_relu", 1), ("selu", None)])
def test_gains_are_torchs(nonlinearity, param):
    assert init.calculate_gain(nonlinearity, param) == \
        torch.nn.init.calculate_gain(nonlinearity, param)


@pytest.mark.parametrize("shape, groups", [((4, 4, 3), 1), ((6, 3, 3, 3), 1),
                                           ((4, 2, 3, 3, 3), 2), ((6, 2, 5, 4), 3)])
def test_dirac_is_torchs(shape, groups):
    ours, theirs = mg.empty(*shape), torch.empty(*shape)
    assert init.dirac_(ours, groups) is ours
    torch.nn.init.dirac_(theirs, groups)
    np.testing.assert_array_equal(ours.data, theirs.numpy())


@pytest.mark.parametrize("shape", [(3, 3), (2, 5), (5, 2)])
def test_eye_is_torchs(shape):
    ours, theirs = mg.empty(*shape, dtype=mg.float64), torch.empty(*shape, dtype=torch.float64)
    np.testing.assert_array_equal(init.eye_(ours).data, torch.nn.init.eye_(theirs).numpy())


@pytest.mark.parametrize("call", [
    lambda m, t: m.nn.init.eye_(t(2, 3, 4)), lambda m, t: m.nn.init.dirac_(t(3, 3)),
    lambda m, t: m.nn.init.dirac_(t(3, 3, 3), groups=2), lambda m, t: m.nn.init.orthogonal_(t(3)),
    lambda m, t: m.nn.init.sparse_(t(3, 3, 3), 0.5), lambda m, t: m.nn.init.xavier_uniform_(t(3)),
    lambda m, t: m.nn.init.kaiming_normal_(t(3, 3), mode="fan_x"),
    lambda m, t: m.nn.init.calculate_gain("softplus"),
    lambda m, t: m.nn.init.calculate_gain("leaky_relu", "x")])
def test_bad_arguments_raise_torchs_errors(call):
    with pytest.raises(Exception) as theirs:
        call(torch, torch.empty)
    with pytest.raises(theirs.type):
        call(mg, mg.empty)


@pytest.mark.parametrize("shape, gain", [((20, 20), 1), ((10, 30), 2.0), ((30, 10), 0.5),
                                         ((8, 3, 3, 3), 1)])
def test_orthogonal_is_orthogonal_with_the_gain(shape, gain):
    mg.manual_seed(0)
    ours = init.orthogonal_(mg.empty(*shape, dtype=mg.float64), gain=gain).numpy()
    theirs = torch.nn.init.orthogonal_(torch.empty(*shape, dtype=torch.float64), gain=gain)
    for q in (ours.reshape(shape[0], -1), theirs.numpy().reshape(shape[0], -1)):
        small = q @ q.T if q.shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, gain ** 2 * np.eye(len(small)), atol=1e-12)
    other = init.orthogonal_(mg.empty(*shape, dtype=mg.float64)).numpy()
    assert not np.allclose(other, ours / gain)  # drawn afresh


def test_orthogonal_draws_are_haar_distributed():
    # Uniform over rotations: every entry of a random n x n orthogonal matrix has mean 0 and
    # variance 1/n; without the sign fix from R's diagonal, the diagonal's mean is positive.
    n, draws = 4, 3000
    mg.manual_seed(0)
    samples = np.stack([init.orthogonal_(mg.empty(n, n, dtype=mg.float64)).numpy()
                        for _ in range(draws)])
    assert abs(samples.mean()) < 0.02 and abs(np.diagonal(samples, axis1=1, axis2=2).mean()) < 0.03
    np.testing.assert_allclose(samples.var(axis=0), 1 / n, rtol=0.15)


def test_sparse_zeroes_that_fraction_of_each_column():
    mg.manual_seed(0)
    ours = init.sparse_(mg.empty(10, 400, dtype=mg.float32), sparsity=0.25, std=0.5).numpy()
    theirs = torch.nn.init.sparse_(torch.empty(10, 400), sparsity=0.25, std=0.5).numpy()
    for values in (ours, theirs):
        assert ((values == 0).sum(axis=0) == math.ceil(0.25 * 10)).all()
        nonzero = values[values != 0]
        assert abs(nonzero.std() - 0.5) < 0.03 and abs(nonzero.mean()) < 0.03
    assert ours.dtype == np.float32


@pytest.mark.parametrize("name, kwargs, shape", [
    ("uniform_", dict(a=-2, b=3), (200, 100)), ("normal_", dict(mean=1, std=2), (200, 100)),
    ("trunc_normal_", dict(std=1, a=-1, b=1.5), (200, 100)),
    ("xavier_uniform_", dict(gain=2), (300, 100)), ("xavier_normal_", dict(), (300, 100)),
    ("kaiming_uniform_", dict(a=0.1), (64, 32, 3, 3)),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), (64, 32, 3, 3))])
def test_random_inits_have_torchs_distribution(name, kwargs, shape):
    mg.manual_seed(0)
    torch.manual_seed(0)
    ours = getattr(init, name)(mg.empty(*shape, dtype=mg.float64), **kwargs).numpy()
    theirs = getattr(torch.nn.init, name)(torch.empty(*shape, dtype=torch.float64),
                                          **kwargs).numpy()
    bounded = "uniform" in name or "trunc" in name  # then the extremes are the bounds
    for statistic in (np.mean, np.std) + ((np.min, np.max) if bounded else ()):
        a, b = statistic(ours), statistic(theirs)
        assert abs(a - b) <= 0.03 * max(abs(b), np.std(theirs)), (statistic.__name__, a, b)


@pytest.mark.parametrize("name", ["constant_", "zeros_", "ones_"])
def test_constant_inits_are_exact(name):
    args = (0.25,) if name == "constant_" else ()
    ours = getattr(init, name)(mg.empty(3, 2), *args)
    theirs = getattr(torch.nn.init, name)(torch.empty(3, 2), *args)
    np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_deprecated_names_warn_as_torchs():
    for name in ("uniform", "normal", "constant", "xavier_uniform", "kaiming_normal",
                 "orthogonal", "sparse"):
        args = {"constant": (0.5,), "sparse": (0.5,)}.get(name, ())
        with pytest.warns(FutureWarning):
            getattr(torch.nn.init, name)(torch.empty(4, 4), *args)
        with pytest.warns(FutureWarning, match=f"{name}_"):
            getattr(init, name)(mg.empty(4, 4), *args)


def test_zero_element_tensors_are_left_alone_with_torchs_warning():
    with pytest.warns(UserWarning, match="zero-element"):
        torch.nn.init.kaiming_uniform_(torch.empty(0, 3))
    with pytest.warns(UserWarning, match="zero-element"):
        init.kaiming_uniform_(mg.empty(0, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert init.orthogonal_(mg.empty(0, 3)).shape == (0, 3)
