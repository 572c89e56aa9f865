"""grad_fn names and classes as torch's for the common ops, and set_detect_anomaly as a
context manager restoring the mode from before."""
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def _graphs(lib):
    """Each common op's result, by a key, built the same way in `lib` (mpigrad or torch)."""
    F = lib.nn.functional
    x = lib.ones(2, 3, requires_grad=True)
    w = lib.ones(4, 3, requires_grad=True)
    b = lib.ones(2, 3, 4, requires_grad=True)
    b4 = lib.ones(1, 2, 3, 4, requires_grad=True)
    c = lib.ones(2, 4, 5, requires_grad=True)
    v = lib.ones(3, requires_grad=True)
    img = lib.ones(1, 2, 5, 5, requires_grad=True)
    seq = lib.ones(2, 3, 6, requires_grad=True)
    p = lib.full((2, 3), 0.5, requires_grad=True)
    t = lib.tensor([0, 2])
    return {
        "add": lambda: x + x, "sub": lambda: x - 1, "rsub": lambda: 1 - x,
        "mul": lambda: x * x, "div": lambda: x / 2, "neg": lambda: -x, "pow": lambda: x ** 2,
        "square": lambda: x.square(), "remainder": lambda: x % 2, "abs": lambda: x.abs(),
        "sqrt": lambda: x.sqrt(), "rsqrt": lambda: x.rsqrt(), "exp": lambda: x.exp(),
        "log": lambda: x.log(), "sin": lambda: x.sin(), "cos": lambda: x.cos(),
        "erf": lambda: x.erf(), "floor": lambda: x.floor(), "tanh": lambda: x.tanh(),
        "sigmoid": lambda: x.sigmoid(), "relu": lambda: lib.relu(x),
        "relu_": lambda: (x * 1).relu_(), "add_": lambda: (x * 1).add_(1),
        "gelu": lambda: F.gelu(x), "silu": lambda: F.silu(x), "leaky_relu": lambda: F.leaky_relu(x),
        "elu": lambda: F.elu(x), "softplus": lambda: F.softplus(x),
        "hardtanh": lambda: F.hardtanh(x),
        "clamp": lambda: x.clamp(0, 1), "clamp_min": lambda: x.clamp(min=0),
        "clamp_tensor": lambda: x.clamp(p.detach()), "maximum": lambda: lib.maximum(x, p),
        "where": lambda: lib.where(x > 0, x, x * 2),
        "masked_fill": lambda: x.masked_fill(x > 5, 0.0),
        "tril": lambda: x.tril(),
        # matrix products
        "mm": lambda: x @ w.t(), "mv": lambda: x @ v, "dot": lambda: v @ v, "bmm": lambda: b.bmm(c),
        "matmul_batched": lambda: b @ c, "addmm": lambda: lib.addmm(p, x, lib.ones(3, 3)),
        "baddbmm": lambda: lib.baddbmm(lib.ones(2, 3, 5), b, c),
        "linear": lambda: lib.nn.Linear(3, 4)(x),
        "linear_no_bias": lambda: lib.nn.Linear(3, 4, bias=False)(x),
        # shapes
        "t": lambda: x.t(), "T": lambda: x.T, "mT": lambda: b.mT,
        "transpose": lambda: b.transpose(1, 2), "permute": lambda: x.permute(1, 0),
        "view": lambda: x.view(6), "reshape": lambda: x.reshape(6),
        "flatten": lambda: b.flatten(1), "unsqueeze": lambda: x.unsqueeze(0),
        "squeeze": lambda: x[:1].squeeze(), "squeeze_dim": lambda: x[:1].squeeze(0),
        "squeeze_dims": lambda: x[:1].squeeze((0,)), "expand": lambda: x[:1].expand(2, 3),
        "repeat": lambda: x.repeat(2, 1), "select": lambda: x[0], "slice": lambda: x[:, 1:],
        "index": lambda: x[t[:1]], "index_select": lambda: x.index_select(1, t),
        "gather": lambda: x.gather(1, lib.tensor([[0], [1]])), "narrow": lambda: x.narrow(1, 0, 2),
        "cat": lambda: lib.cat([x, x]), "stack": lambda: lib.stack([x, x]),
        "split": lambda: x.split(1)[0], "split_sizes": lambda: x.split([1, 1])[0],
        "chunk": lambda: x.chunk(3, 1)[0], "unbind": lambda: x.unbind(0)[0],
        "clone": lambda: x.clone(), "to_double": lambda: x.double(), "flip": lambda: x.flip(0),
        "roll": lambda: x.roll(1, 0), "pad": lambda: F.pad(x, (1, 1)),
        "pad_reflect": lambda: F.pad(seq, (1, 1), mode="reflect"),
        # reductions
        "sum": lambda: x.sum(), "sum_dim": lambda: x.sum(1), "mean": lambda: x.mean(),
        "mean_dim": lambda: x.mean(1), "var": lambda: x.var(), "std": lambda: x.std(),
        "norm": lambda: x.norm(), "prod": lambda: x.prod(), "prod_dim": lambda: x.prod(1),
        "max": lambda: x.max(), "max_dim": lambda: x.max(1)[0], "min": lambda: x.min(),
        "min_dim": lambda: x.min(0)[0], "amax": lambda: x.amax(1), "cumsum": lambda: x.cumsum(1),
        "logsumexp": lambda: x.logsumexp(1), "topk": lambda: x.topk(2)[0],
        "sort": lambda: x.sort()[0],
        "softmax": lambda: x.softmax(-1), "log_softmax": lambda: x.log_softmax(-1),
        # layers
        "conv1d": lambda: F.conv1d(seq, lib.ones(2, 3, 3)),
        "conv2d": lambda: F.conv2d(img, lib.ones(3, 2, 3, 3, requires_grad=True)),
        "conv_transpose2d": lambda: F.conv_transpose2d(img, lib.ones(2, 3, 3, 3)),
        "max_pool2d": lambda: F.max_pool2d(img, 2), "avg_pool2d": lambda: F.avg_pool2d(img, 2),
        "max_pool1d": lambda: F.max_pool1d(seq, 2),
        "batch_norm": lambda: F.batch_norm(img, None, None, training=True),
        "layer_norm": lambda: F.layer_norm(x, (3,)),
        "embedding": lambda: F.embedding(t, x.t()),
        "sdpa": lambda: F.scaled_dot_product_attention(b, b, b),
        "sdpa_4d": lambda: F.scaled_dot_product_attention(b4, b4, b4, is_causal=True),
        "sdpa_4d_dropout": lambda: F.scaled_dot_product_attention(b4, b4, b4, dropout_p=0.5),
        # losses, each reduction
        **{f"{name}_{reduction}": (lambda f=f, reduction=reduction: f(reduction))
           for reduction in ("mean", "sum", "none")
           for name, f in {
               "cross_entropy": lambda r: F.cross_entropy(x, t, reduction=r),
               "cross_entropy_3d": lambda r: F.cross_entropy(seq, lib.zeros(2, 6, dtype=lib.long),
                                                             reduction=r),
               "cross_entropy_smoothing": lambda r: F.cross_entropy(x, t, label_smoothing=0.1,
                                                                    reduction=r),
               "cross_entropy_probabilities": lambda r: F.cross_entropy(x, p.detach(),
                                                                        reduction=r),
               "nll_loss": lambda r: F.nll_loss(x, t, reduction=r),
               "mse_loss": lambda r: F.mse_loss(x, p, reduction=r),
               "l1_loss": lambda r: F.l1_loss(x, p, reduction=r),
               "smooth_l1_loss": lambda r: F.smooth_l1_loss(x, p, reduction=r),
               "huber_loss": lambda r: F.huber_loss(x, p, reduction=r),
               "binary_cross_entropy": lambda r: F.binary_cross_entropy(p, x.detach() * 0.5,
                                                                        reduction=r),
               "bce_with_logits": lambda r: F.binary_cross_entropy_with_logits(
                   x, p.detach(), reduction=r),
           }.items()},
    }


NAMES = sorted(_graphs(mg))


def test_the_table_covers_torchs_common_ops():
    assert NAMES == sorted(_graphs(torch)) and len(NAMES) > 100


@pytest.mark.parametrize("key", NAMES)
def test_grad_fn_names_and_classes_are_torchs(key):
    ours, theirs = _graphs(mg)[key](), _graphs(torch)[key]()
    expected = type(theirs.grad_fn).__name__
    assert (type(ours.grad_fn).__name__, ours.grad_fn.name()) == (expected, expected)
    assert f"grad_fn=<{expected}>" in repr(ours)


def test_set_detect_anomaly_restores_the_previous_mode_after_a_block():
    for lib in (mg, torch):
        assert not lib.is_anomaly_enabled()
        with lib.autograd.set_detect_anomaly(True):
            assert lib.is_anomaly_enabled()
            with lib.autograd.set_detect_anomaly(False):
                assert not lib.is_anomaly_enabled()
            assert lib.is_anomaly_enabled()
        assert not lib.is_anomaly_enabled()
        lib.autograd.set_detect_anomaly(True)  # as a plain call it stays set
        assert lib.is_anomaly_enabled()
        lib.autograd.set_detect_anomaly(False)
        assert not lib.is_anomaly_enabled()


def test_inference_tensors_and_their_errors_are_torchs():
    results = []
    for lib in (mg, torch):
        w = lib.ones(3, requires_grad=True)
        with lib.inference_mode():
            x = lib.ones(3) * 2
            x.add_(1)  # in place inside inference mode: allowed
        outcome = [x.is_inference(), lib.ones(1).is_inference(), (x + 1).is_inference()]
        normal = x.clone()  # (torch writes before refusing an in-place update: clone first)
        for attempt in (lambda: w * x, lambda: x.add_(1), lambda: x.mul_(2)):
            with pytest.raises(RuntimeError) as error:
                attempt()
            outcome.append(str(error.value).split(".")[0])
        outcome += [normal.is_inference(), float((w * normal).sum())]
        with lib.no_grad():
            with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
                x.zero_()
        results.append(outcome)
    assert results[0] == results[1]
    assert results[0][:3] == [True, False, False]
