"""The in-place methods on a non-leaf, recorded in the graph: values and gradients as torch's."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")

V = np.array([0.3, -1.2, 2.0, 0.7])
CASES = {
    "add_": lambda t, T: t.add_(T(V + 1), alpha=0.5),
    "sub_": lambda t, T: t.sub_(T(V * 2), alpha=2),
    "mul_": lambda t, T: t.mul_(T(V - 3)),
    "div_": lambda t, T: t.div_(T(V * 0 + 2.0)),
    "pow_": lambda t, T: t.pow_(2),
    "neg_": lambda t, T: t.neg_(),
    "exp_": lambda t, T: t.exp_(),
    "sigmoid_": lambda t, T: t.sigmoid_(),
    "tanh_": lambda t, T: t.tanh_(),
    "relu_": lambda t, T: t.relu_(),
    "clamp_": lambda t, T: t.clamp_(-1, 1),
    "lerp_": lambda t, T: t.lerp_(T(V[::-1].copy()), 0.3),
    "addcmul_": lambda t, T: t.addcmul_(T(V + 1), T(V + 2), value=0.5),
    "addcdiv_": lambda t, T: t.addcdiv_(T(V + 3), T(V + 5), value=0.5),
    "masked_fill_": lambda t, T: t.masked_fill_(T(V) > 0.5, 0.0),
    "zero_": lambda t, T: t.zero_(),
    "fill_": lambda t, T: t.fill_(2.5),
    "copy_": lambda t, T: t.copy_(T(V * 4)),
    "setitem": lambda t, T: t.__setitem__(slice(1, 3), T(V[:2] * 10)),
}


@pytest.mark.parametrize("name", CASES)
def test_in_place_method_matches_torch(name):
    weights = [1.0, 2.0, 3.0, 4.0]
    a = mg.tensor(V.copy(), requires_grad=True)
    y = a * 1.5
    CASES[name](y, mg.tensor)
    (y * mg.tensor(weights, dtype=mg.float64)).sum().backward()

    ta = torch.tensor(V.copy(), requires_grad=True)
    ty = ta * 1.5
    CASES[name](ty, torch.tensor)
    (ty * torch.tensor(weights, dtype=torch.float64)).sum().backward()

    assert y._version >= 1
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
