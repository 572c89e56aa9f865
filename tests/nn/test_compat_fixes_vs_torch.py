"""Idioms of public PyTorch programs that behaved differently: backward through an in-place
LeakyReLU, and replacing a child module keeping its place."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("slope", [0.2, 0.0, 1.5])
def test_backward_through_an_inplace_leaky_relu_matches_torch(slope, rng):
    x = rng.standard_normal((6, 3))
    w1, w2 = rng.standard_normal((4, 3)), rng.standard_normal((1, 4))
    b1, b2 = rng.standard_normal(4), rng.standard_normal(1)
    results = []
    for lib in (mg, torch):
        model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.LeakyReLU(slope, inplace=True),
                                  lib.nn.Linear(4, 1)).double()
        with lib.no_grad():
            model[0].weight.copy_(lib.tensor(w1))
            model[2].weight.copy_(lib.tensor(w2))
            model[0].bias.copy_(lib.tensor(b1))
            model[2].bias.copy_(lib.tensor(b2))
        out = model(lib.tensor(x))
        out.sum().backward()
        results.append((out.detach().numpy(), model[0].weight.grad.numpy(),
                        model[1](lib.tensor(x, requires_grad=True) * 1).grad_fn.name()))
    (ours, our_grad, our_name), (theirs, their_grad, their_name) = results
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    np.testing.assert_allclose(our_grad, their_grad, rtol=1e-12)
    assert our_name == their_name == "LeakyReluBackward1"


def test_the_functional_inplace_leaky_relu_backward_matches_torch(rng):
    """F.leaky_relu(inplace=True), as GAN discriminators call it between convolutions."""
    x, w = rng.standard_normal((5, 3)), rng.standard_normal((3, 3))
    grads = []
    for lib in (mg, torch):
        weight = lib.tensor(w, requires_grad=True)
        hidden = lib.tensor(x) @ weight
        lib.nn.functional.leaky_relu(hidden, 0.2, inplace=True).pow(2).sum().backward()
        grads.append(weight.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)


def test_an_inplace_leaky_relu_with_a_negative_slope_is_refused_as_torch():
    with pytest.raises(RuntimeError, match="negative slope"):
        x = torch.randn(3, requires_grad=True) * 1
        torch.nn.LeakyReLU(-0.1, inplace=True)(x).sum().backward()
    with pytest.raises(RuntimeError, match="negative slope"):
        x = mg.randn(3, requires_grad=True) * 1
        mg.nn.LeakyReLU(-0.1, inplace=True)(x).sum().backward()


def test_replacing_a_child_keeps_its_place_as_torch():
    orders = []
    for lib in (mg, torch):
        model = lib.nn.Sequential()
        model.conv = lib.nn.Linear(2, 2)
        model.act = lib.nn.ReLU()
        model.fc = lib.nn.Linear(2, 2)
        model.conv = lib.nn.Linear(2, 3)  # e.g. swapping a pretrained model's first layer
        model.act = lib.nn.Tanh()
        rebuilt = lib.nn.Sequential(*model.children())
        orders.append(([type(m).__name__ for m in rebuilt], [n for n, _ in model.named_children()]))
        layer = lib.nn.Linear(2, 2)
        layer.weight = lib.nn.Parameter(lib.zeros(2, 2))
        orders.append([n for n, _ in layer.named_parameters()])
    assert orders[0] == orders[2] == (["Linear", "Tanh", "Linear"], ["conv", "act", "fc"])
    assert orders[1] == orders[3] == ["weight", "bias"]
