"""nn.init: torch's formulas, checked by fan computation and by the statistics of large draws."""
import math

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.nn import init


def test_gains():
    assert init.calculate_gain("conv2d") == 1
    assert init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")


def test_gains_agree_with_torch():
    torch = pytest.importorskip("torch")
    for name, param in [("linear", None), ("tanh", None), ("relu", None), ("selu", None),
                        ("leaky_relu", None), ("leaky_relu", 0.3), ("conv_transpose2d", None)]:
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param))


def test_fans_of_a_conv_weight():
    assert init._calculate_fan_in_and_fan_out(mg.empty(16, 3, 5, 5)) == (75, 400)
    assert init._calculate_fan_in_and_fan_out(mg.empty(7, 4)) == (4, 7)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(mg.empty(5))


# (function, kwargs, expected std, uniform bound or None) for a (400, 100, 3) tensor:
# fan_in = 300, fan_out = 1200.
CASES = [
    (init.kaiming_uniform_, dict(), math.sqrt(2) / math.sqrt(300), True),  # a=0: slope 0
    (init.kaiming_uniform_, dict(a=math.sqrt(5)), 1 / math.sqrt(3 * 300), True),
    (init.kaiming_normal_, dict(mode="fan_out", nonlinearity="relu"), math.sqrt(2 / 1200), False),
    (init.xavier_uniform_, dict(gain=2.0), 2 * math.sqrt(2 / 1500), True),
    (init.xavier_normal_, dict(), math.sqrt(2 / 1500), False),
    (init.normal_, dict(mean=0.0, std=0.3), 0.3, False),
    (init.uniform_, dict(a=-0.5, b=0.5), 1 / math.sqrt(12), True),
]


@pytest.mark.parametrize("fn,kwargs,std,uniform", CASES)
def test_random_inits_have_the_formula_spread(fn, kwargs, std, uniform):
    w = nn.Parameter(mg.empty(400, 100, 3))
    assert fn(w, **kwargs) is w
    assert w.grad_fn is None and w.requires_grad
    # 120000 draws: the sample std is within 1% of the true one with overwhelming probability.
    assert w.detach().numpy().std() == pytest.approx(std, rel=0.01)
    assert abs(w.detach().numpy().mean()) < 0.02 * std
    if uniform:
        bound = math.sqrt(3) * std
        assert np.abs(w.data).max() <= bound
        assert np.abs(w.data).max() > 0.999 * bound


def test_kaiming_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="'fan_in' or 'fan_out', got 'fan_avg'"):
        init.kaiming_normal_(mg.empty(3, 3), mode="fan_avg")


def test_trunc_normal_stays_inside_the_bounds():
    w = init.trunc_normal_(mg.empty(20000), mean=1.0, std=2.0, a=0.0, b=1.5)
    assert w.detach().numpy().min() >= 0.0 and w.detach().numpy().max() <= 1.5
    # Not clipped: no mass piles up on the bounds.
    assert (w.data == 0.0).sum() == 0 and (w.data == 1.5).sum() == 0


def test_constant_inits_fill_in_place():
    w = nn.Parameter(mg.empty(2, 3))
    assert init.constant_(w, 0.25) is w
    np.testing.assert_array_equal(w.data, 0.25)
    np.testing.assert_array_equal(init.zeros_(w).data, 0)
    np.testing.assert_array_equal(init.ones_(w).data, 1)


def test_a_private_generator_gives_repeatable_draws():
    a = init.kaiming_uniform_(mg.empty(4, 4), generator=mg.Generator(5))
    b = init.kaiming_uniform_(mg.empty(4, 4), generator=mg.Generator(5))
    np.testing.assert_array_equal(a.data, b.data)
