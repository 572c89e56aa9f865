"""issue 21's activations against torch in float64: values, gradients (kinks included),
extreme inputs, modules, in-place forms and errors."""
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# The kinks of every function below, plus ordinary and extreme values.
POINTS = np.array([-800.0, -30.0, -6.0, -3.0, -1.2, -1.0, 0.0, 0.3, 0.5, 1.0, 2.5, 3.0, 6.0,
                   7.0, 25.0, 800.0])

FUNCTIONS = [
    ("hardtanh", (), {}), ("hardtanh", (-2.0, 2.5), {}), ("relu6", (), {}),
    ("elu", (), {}), ("elu", (), {"alpha": 0.7}), ("selu", (), {}), ("celu", (), {}),
    # torch differentiates CELU with 1/alpha in float32; 1.25 is exact there, so it agrees.
    ("celu", (), {"alpha": 1.25}), ("softplus", (), {}),
    ("softplus", (), {"beta": 2.0, "threshold": 5.0}), ("logsigmoid", (), {}),
    ("hardsigmoid", (), {}), ("hardswish", (), {}), ("softsign", (), {}), ("mish", (), {}),
    ("threshold", (0.5, -2.0), {}), ("threshold", (0.0, 0.0), {}),
]


def _pair(values):
    return (mg.tensor(values, requires_grad=True),
            torch.tensor(values, dtype=torch.float64, requires_grad=True))


def _assert_same(ours, theirs):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("name,args,kwargs", FUNCTIONS,
                         ids=[f"{n}{a}{k}" for n, a, k in FUNCTIONS])
def test_function_matches_torch_at_kinks_and_extremes(name, args, kwargs):
    ours, theirs = _pair(POINTS)
    out = getattr(F, name)(ours, *args, **kwargs)
    expected = getattr(TF, name)(theirs, *args, **kwargs)
    _assert_same(out, expected)
    assert np.isfinite(out.detach().numpy()).all()
    g = np.linspace(-1, 2, POINTS.size)
    out.backward(mg.tensor(g))
    expected.backward(torch.tensor(g))
    _assert_same(ours.grad, theirs.grad)


@pytest.mark.parametrize("name,args", [("Hardtanh", (-0.5, 0.5)), ("ReLU6", ()), ("ELU", (0.5,)),
                                       ("SELU", ()), ("CELU", (0.5,)), ("Hardsigmoid", ()),
                                       ("Hardswish", ()), ("Mish", ()), ("Threshold", (0.1, 3.0))])
def test_inplace_module_matches_torch(name, args, rng):
    values = rng.standard_normal((3, 4)) * 4
    ours, theirs = _pair(values)
    out = getattr(mg.nn, name)(*args, inplace=True)(ours * 1.0)
    expected = getattr(torch.nn, name)(*args, inplace=True)(theirs * 1.0)
    _assert_same(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _assert_same(ours.grad, theirs.grad)
    assert repr(getattr(mg.nn, name)(*args, inplace=True)) == repr(
        getattr(torch.nn, name)(*args, inplace=True))


@pytest.mark.parametrize("name,args", [("Softplus", (2.0, 3.0)), ("Softsign", ()),
                                       ("LogSigmoid", ()), ("GLU", (1,)), ("GLU", ())])
def test_module_matches_torch(name, args, rng):
    values = rng.standard_normal((3, 4, 2)) * 3
    ours, theirs = _pair(values)
    out = getattr(mg.nn, name)(*args)(ours)
    expected = getattr(torch.nn, name)(*args)(theirs)
    _assert_same(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _assert_same(ours.grad, theirs.grad)
    assert repr(getattr(mg.nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))


@pytest.mark.parametrize("shape,num_parameters", [((3, 4, 2), 4), ((3, 4), 1), ((5,), 1),
                                                  ((2, 3, 2, 2), 3)])
def test_prelu_matches_torch_with_weight_gradient(shape, num_parameters, rng):
    values = rng.standard_normal(shape)
    values.flat[0] = 0.0  # torch takes the slope side at 0
    ours, theirs = _pair(values)
    module = mg.nn.PReLU(num_parameters, init=0.3)
    reference = torch.nn.PReLU(num_parameters, init=0.3, dtype=torch.float64)
    assert module.weight.dtype == mg.float64 and module.weight.shape == (num_parameters,)
    module.load_state_dict({"weight": mg.tensor(rng.uniform(-1, 1, num_parameters))})
    reference.load_state_dict({"weight": torch.tensor(module.weight.detach().numpy())})
    out, expected = module(ours), reference(theirs)
    _assert_same(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _assert_same(ours.grad, theirs.grad)
    _assert_same(module.weight.grad, reference.weight.grad)


def test_errors_match_torch():
    x = mg.randn(3, 5)
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 "
                                           "is size 5"):
        F.glu(x)
    with pytest.raises(RuntimeError, match="glu does not support scalars"):
        F.glu(mg.tensor(1.0))
    with pytest.raises(RuntimeError, match="Found parameter numbers = 3 and channel size = 5"):
        F.prelu(x, mg.ones(3))
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(x, 2.0, 1.0)
    with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater"):
        mg.nn.Hardtanh(2.0, 1.0)
    with pytest.raises(RuntimeError, match="alpha cannot be 0 for CELU"):
        F.celu(x, 0.0)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.softplus(mg.arange(3))
