"""LayerNorm and RMSNorm: the fused kernels against torch (with and without the affine
parameters, several normalised dimensions, odd sizes, strided and half input), and
gradcheck / gradgradcheck through their rules."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.autograd import gradcheck, gradgradcheck  # noqa: E402

from .torch_check import check  # noqa: E402

F = mg.nn.functional
TF = torch.nn.functional


def _data(shape, seed=0, scale=1.0, shift=0.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale + shift


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("normalized", [(7,), (3, 7)])
def test_layer_norm_matches_torch(normalized, affine, dtype):
    arrays = [_data((5, 3, 7), shift=3.0)]
    arrays += [_data(normalized, 1) for _ in range({"none": 0, "weight": 1, "both": 2}[affine])]

    def run(functional):
        return lambda x, *affine_parts: functional.layer_norm(x, normalized, *affine_parts,
                                                              eps=1e-5)
    check(run(F), run(TF), arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm_matches_torch(eps, weighted, dtype):
    arrays = [_data((4, 3, 9), scale=2.0)] + ([_data((3, 9), 1)] if weighted else [])

    def run(functional):
        return lambda x, *weight: functional.rms_norm(x, (3, 9), *weight, eps=eps)
    check(run(F), run(TF), arrays, dtype)


def test_strided_and_half_inputs():
    check(lambda x, w, b: F.layer_norm(x.transpose(0, 1)[::2], (5,), w, b),
          lambda x, w, b: TF.layer_norm(x.transpose(0, 1)[::2], (5,), w, b),
          [_data((7, 6, 5)), _data((5,), 1), _data((5,), 2)], np.float64)
    check(lambda x, w: F.rms_norm(x[:, ::3], (4,), w), lambda x, w: TF.rms_norm(x[:, ::3], (4,), w),
          [_data((6, 9, 4)), _data((4,), 1)], np.float64)
    x = _data((3, 8)).astype(np.float16)
    out = F.layer_norm(mg.tensor(x), (8,))
    assert out.dtype == mg.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32),
                               TF.layer_norm(torch.tensor(x).float(), (8,)).numpy(), atol=2e-3)


def test_a_weight_of_the_wrong_shape_is_refused():
    with pytest.raises(RuntimeError, match="same shape as normalized_shape"):
        F.layer_norm(mg.ones(2, 4), (4,), mg.ones(2, 4))


def test_gradcheck_and_gradgradcheck():
    x, w, b = (mg.tensor(_data(s, i), requires_grad=True)
               for i, s in enumerate([(3, 2, 4), (2, 4), (2, 4)]))
    assert gradcheck(lambda x, w, b: F.layer_norm(x, (2, 4), w, b), (x, w, b))
    assert gradgradcheck(lambda x, w, b: F.layer_norm(x, (2, 4), w, b), (x, w, b))
    assert gradcheck(lambda x, w: F.rms_norm(x, (4,), w[0], eps=1e-6), (x, w))
    assert gradgradcheck(lambda x, w: F.rms_norm(x, (4,), w[0], eps=1e-6), (x, w))


def test_layer_norm_and_rms_norm_keep_torchs_statistics_for_their_backward():
    """The forward keeps mean and rstd per row (torch's native_layer_norm saves the same), and
    the fused backward reads them: no second pass over x for the statistics."""
    x = _data((4, 6), shift=2.0)
    out = F.layer_norm(mg.tensor(x, requires_grad=True), (6,))
    _, mean, rstd = torch.native_layer_norm(torch.tensor(x), (6,), None, None, 1e-5)
    kept_mean, kept_rstd = out.grad_fn.kept
    np.testing.assert_allclose(kept_mean, mean.numpy().ravel(), rtol=1e-12)
    np.testing.assert_allclose(kept_rstd, rstd.numpy().ravel(), rtol=1e-12)
    rrms = F.rms_norm(mg.tensor(x, requires_grad=True), (6,), eps=1e-6).grad_fn.kept
    np.testing.assert_allclose(rrms, 1 / np.sqrt((x * x).mean(1) + 1e-6), rtol=1e-12)
    node = out.grad_fn
    out.backward(mg.ones(4, 6))
    assert node.kept is None  # released with the graph


def _batch_norm(functional, training=True, running=None, momentum=0.1):
    def run(x, *affine):
        buffers = (None, None) if running is None else running(mg if functional is F else torch)
        return functional.batch_norm(x, *buffers, *affine, training=training, momentum=momentum,
                                     eps=1e-5)
    return run


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("affine", [0, 1, 2])
@pytest.mark.parametrize("shape", [(7, 3), (5, 3, 7), (3, 3, 5, 3)])
def test_batch_norm_in_training_matches_torch(shape, affine, dtype):
    arrays = [_data(shape, shift=2.0, scale=3.0)] + [_data(3, i + 1) for i in range(affine)]
    check(_batch_norm(F), _batch_norm(TF), arrays, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batch_norm_in_eval_is_an_affine_map_per_channel_as_torch(dtype):
    mean, var = _data(4, 5), np.abs(_data(4, 6)) + 0.5

    def running(lib):
        return lib.tensor(mean.astype(dtype)), lib.tensor(var.astype(dtype))
    arrays = [_data((5, 4, 3), shift=1.0), _data(4, 1), _data(4, 2)]
    check(_batch_norm(F, False, running), _batch_norm(TF, False, running), arrays, dtype)
    check(_batch_norm(F, False, running), _batch_norm(TF, False, running), arrays[:1], dtype)


def test_batch_norm_on_strided_and_half_input():
    check(lambda x, w, b: F.batch_norm(x.transpose(0, 2)[::2], None, None, w, b, training=True),
          lambda x, w, b: TF.batch_norm(x.transpose(0, 2)[::2], None, None, w, b, training=True),
          [_data((5, 4, 6)), _data(4, 1), _data(4, 2)], np.float64)
    x = _data((6, 3, 2)).astype(np.float16)
    out = F.batch_norm(mg.tensor(x), None, None, training=True)
    assert out.dtype == mg.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32), TF.batch_norm(
        torch.tensor(x).float(), None, None, training=True).numpy(), atol=3e-3)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("layer, shape", [("BatchNorm1d", (6, 3)), ("BatchNorm1d", (4, 3, 5)),
                                          ("BatchNorm2d", (3, 3, 4, 5))])
def test_running_statistics_and_batch_statistics_match_torch(layer, shape, momentum):
    """Running mean and (unbiased) variance after several training batches, with momentum and
    as a cumulative average (momentum=None); then eval uses them. The batch statistics the
    fused backward reads are torch's saved mean and invstd."""
    batches = [_data(shape, seed, scale=1.0 + seed, shift=seed) for seed in range(4)]

    def run(lib):
        module = getattr(lib.nn, layer)(3, momentum=momentum).double()
        for x in batches:
            out = module(lib.tensor(x, requires_grad=True))
            kept = out.grad_fn.kept if lib is mg else None
            out.backward(lib.tensor(_data(shape, 9)))
        module.eval()
        return module, module(lib.tensor(batches[0])).detach().numpy(), kept

    ours, our_eval, kept = run(mg)
    theirs, their_eval, _ = run(torch)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(ours, name).numpy(), getattr(theirs, name).numpy(),
                                   rtol=1e-12, atol=1e-12)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 4
    for name in ("weight", "bias"):
        np.testing.assert_allclose(getattr(ours, name).grad.numpy(),
                                   getattr(theirs, name).grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(our_eval, their_eval, rtol=1e-10, atol=1e-10)
    _, mean, invstd = torch.native_batch_norm(torch.tensor(batches[-1]), None, None, None, None,
                                              True, 0.1, 1e-5)
    np.testing.assert_allclose(kept[0], mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(kept[1], invstd.numpy(), rtol=1e-12)


def test_a_graph_holding_running_statistics_sees_the_training_update():
    """The kernel's in-place move of the running buffers counts as a write: backward through
    an eval output computed from them before it refuses, as torch does."""
    module = mg.nn.BatchNorm1d(2).double()
    module.running_var.requires_grad_(True)
    module.eval()
    stale = module(mg.tensor(_data((4, 2))))
    module.train()
    module.running_var.requires_grad_(False)
    module(mg.tensor(_data((4, 2), 1)))
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        stale.sum().backward()


def test_batch_norm_gradcheck_and_gradgradcheck():
    x, w, b = (mg.tensor(_data(s, i), requires_grad=True)
               for i, s in enumerate([(3, 2, 4), (2,), (2,)]))
    train = lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)  # noqa: E731
    assert gradcheck(train, (x, w, b))
    assert gradgradcheck(train, (x, w, b))
    running = mg.tensor(np.abs(_data(2, 3)) + 0.5, requires_grad=True)
    evaluate = lambda x, w, var: F.batch_norm(x, w, var, w, None)  # noqa: E731
    assert gradcheck(evaluate, (x, w, running))
    assert gradgradcheck(evaluate, (x, w, running))
