"""Dropout's one-pass kernel (kernels/compiled/dropout.py). torch's mask stream cannot be
matched, so: the mask's statistics (the drop rate, no correlation between neighbours or
channels), the arithmetic against torch with our mask applied (float64 to 1e-10, float32 bit
for bit on the kept values), forward, backward and tangents consistent with one mask,
manual_seed reproducing it, and gradcheck / gradgradcheck through the fused path."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import gradcheck, gradgradcheck  # noqa: E402

from .torch_check import check  # noqa: E402

F = mg.nn.functional


def _sigmas(observed, expected, count):
    """How many standard deviations a binomial proportion is from its expectation."""
    return abs(observed - expected) / np.sqrt(expected * (1 - expected) / count)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_mask_drops_at_rate_p_with_independent_neighbours(p):
    mg.manual_seed(1)
    out = F.dropout(mg.ones(400, 500), p).numpy()
    dropped = out == 0
    assert _sigmas(dropped.mean(), p, dropped.size) < 5
    # Neighbours (consecutive draws) and rows are independent: both dropped at rate p^2.
    both = (dropped[:, 1:] & dropped[:, :-1]).mean()
    assert _sigmas(both, p * p, dropped[:, 1:].size) < 5
    rows = (dropped[1:] & dropped[:-1]).mean()
    assert _sigmas(rows, p * p, dropped[1:].size) < 5
    # So are the masks of successive calls (successive seeds).
    again = F.dropout(mg.ones(400, 500), p).numpy() == 0
    assert _sigmas((dropped & again).mean(), p * p, dropped.size) < 5
    # The kept values keep the expectation: 1 / (1 - p) each, as torch scales them.
    np.testing.assert_array_equal(np.unique(out), [0, np.float32(1) / np.float32(1 - p)])
    theirs = torch.nn.functional.dropout(torch.ones(400, 500), p).numpy()
    assert _sigmas((theirs == 0).mean(), p, theirs.size) < 5  # the same law as torch's


def test_channel_dropout_drops_whole_channels_independently():
    mg.manual_seed(2)
    out = F.dropout2d(mg.ones(300, 40, 3, 5), 0.4).numpy()
    per_channel = out.reshape(300, 40, -1)
    assert np.all(per_channel == per_channel[:, :, :1])  # one draw per (sample, channel)
    dropped = per_channel[:, :, 0] == 0
    assert _sigmas(dropped.mean(), 0.4, dropped.size) < 5
    assert _sigmas((dropped[:, 1:] & dropped[:, :-1]).mean(), 0.16, dropped[:, 1:].size) < 5
    unbatched = F.dropout1d(mg.ones(200, 7), 0.5).numpy()
    assert np.all(unbatched == unbatched[:, :1]) and 0 < (unbatched == 0).mean() < 1
    batched = F.dropout1d(mg.ones(30, 20, 7), 0.5).numpy()
    assert np.all(batched == batched[:, :, :1])


def test_manual_seed_reproduces_the_mask_and_successive_calls_draw_new_ones():
    x = mg.tensor(np.arange(1, 1001, dtype=np.float32))
    mg.manual_seed(7)
    first, second = F.dropout(x, 0.5).numpy(), F.dropout(x, 0.5).numpy()
    mg.manual_seed(7)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), first)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), second)
    assert not np.array_equal(first == 0, second == 0)
    mg.manual_seed(7)
    module = mg.nn.Dropout(0.5)
    np.testing.assert_array_equal(module(x).numpy(), first)
    module.eval()
    assert module(x) is x


def _our_mask(shape, p, seed=11, feature=False):
    mg.manual_seed(seed)
    ones = mg.ones(*shape, dtype=mg.float64)
    return ((F.dropout2d if feature else F.dropout)(ones, p).numpy() != 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("feature", [False, True])
def test_dropout_is_x_times_its_mask_over_one_minus_p_as_torch_computes_it(feature, dtype):
    """Forward, gradient and tangent against torch's x * mask / (1 - p) with our mask (torch
    scales its mask in x's dtype, as the kernel does)."""
    shape, p = (5, 3, 2, 7), 0.35
    mask = _our_mask(shape, p, feature=feature)

    def ours(x):
        mg.manual_seed(11)
        return (F.dropout2d if feature else F.dropout)(x, p)

    def theirs(x):
        return x * (torch.tensor(mask, dtype=x.dtype) / (1 - p))
    x = np.random.default_rng(0).standard_normal(shape)
    _, (grad,) = check(ours, theirs, [x], dtype)
    if dtype == np.float32:  # kept values bit for bit
        kept = ours(mg.tensor(x.astype(dtype))).numpy()[mask]
        np.testing.assert_array_equal(kept, theirs(torch.tensor(x.astype(dtype))).numpy()[mask])


def test_strided_and_half_inputs_and_in_place():
    x = np.random.default_rng(1).standard_normal((6, 8))
    view = mg.tensor(x, requires_grad=True).transpose(0, 1)[::2]
    mg.manual_seed(3)
    out = F.dropout(view, 0.5)
    kept = out.detach().numpy() != 0
    np.testing.assert_array_equal(out.detach().numpy()[kept], 2 * view.detach().numpy()[kept])
    assert 0 < kept.mean() < 1
    half = F.dropout(mg.ones(64, dtype=mg.float16), 0.25)
    assert half.dtype == mg.float16
    assert set(np.unique(half.numpy()).tolist()) <= {0.0, float(np.float16(4 / 3))}
    target = mg.tensor(x.copy())
    mg.manual_seed(3)
    expected = F.dropout(mg.tensor(x), 0.5).numpy()
    mg.manual_seed(3)
    assert F.dropout(target, 0.5, inplace=True) is target
    np.testing.assert_array_equal(target.numpy(), expected)
    with pytest.raises(RuntimeError, match="leaf"):
        F.dropout(mg.ones(3, requires_grad=True), 0.5, inplace=True)


def test_the_edges_are_torchs():
    nan = mg.tensor([np.nan] * 4)
    assert np.isnan(F.dropout(nan, 1.0).numpy()).all()  # x * 0, as torch's x * mask
    assert np.isnan(F.dropout(nan, 0.5).numpy()).all()
    np.testing.assert_array_equal(F.dropout(mg.ones(5), 1.0).numpy(), np.zeros(5))
    x = mg.ones(3)
    assert F.dropout(x, 0.0) is x and F.dropout(x, 0.5, training=False) is x
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        F.dropout(mg.ones(3, dtype=mg.int64), 0.5)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.nn.functional.dropout(torch.ones(3, dtype=torch.long), 0.5)
    with pytest.raises(ValueError, match="dropout probability"):
        F.dropout(x, 1.5)


def test_backward_and_tangent_use_the_forwards_mask():
    mg.manual_seed(5)
    x = mg.tensor(np.random.default_rng(2).standard_normal((9, 11)), requires_grad=True)
    out = F.dropout(x, 0.6)
    kept = out.detach().numpy() != 0
    (grad,) = mg.autograd.grad(out, x, mg.ones(9, 11), create_graph=True)
    np.testing.assert_array_equal(grad.detach().numpy() != 0, kept)
    (again,) = mg.autograd.grad(out, x, mg.ones(9, 11))  # the fused backward
    np.testing.assert_array_equal(again.numpy(), grad.detach().numpy())
    mg.manual_seed(5)
    _, tangent = mg.func.jvp(lambda x: F.dropout(x, 0.6), (x.detach(),), (mg.ones(9, 11),))
    np.testing.assert_array_equal(tangent.numpy(), grad.detach().numpy())


def test_gradcheck_and_gradgradcheck():
    x = mg.tensor(np.random.default_rng(3).standard_normal((4, 3, 5)), requires_grad=True)

    def seeded(functional):
        def run(x):
            mg.manual_seed(9)
            return functional(x, 0.4)
        return run
    for functional in (F.dropout, F.dropout1d):
        assert gradcheck(seeded(functional), (x,))
        assert gradgradcheck(seeded(functional), (x,))


def test_in_place_dropout_inside_a_graph_sends_the_gradient_through_its_mask():
    x = mg.ones(50, requires_grad=True)
    y = x * 2
    mg.manual_seed(4)
    assert F.dropout(y, 0.5, inplace=True) is y
    y.sum().backward()
    kept = y.detach().numpy() != 0
    assert 0 < kept.mean() < 1
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, 4.0, 0.0))
