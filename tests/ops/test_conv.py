"""The fast convolution and max-pooling ops against the general im2col path (unfold, matmul,
max) and against torch, in float64, to 1e-10; and their derivatives of every order."""
import collections
import math

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import ops
from mpigrad.autograd import gradcheck, gradgradcheck
from mpigrad.dtypes import bfloat16
from mpigrad.nn._checks import pair
from mpigrad.nn import functional as F
from mpigrad.kernels.numpy import conv as conv_kernels
from mpigrad.nn.functional.pooling import _pool_geometry
from mpigrad.ops import conv as conv_ops

TOL = dict(rtol=1e-10, atol=1e-10)

# (input shape, weight shape, stride, padding, dilation): stride 1 (the flat layout) and
# strided, padded, dilated, non-square kernels and images, batch 1, 1x1 (no columns at all).
CONV_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 2, 9, 5), (3, 2, 2, 3), (1, 1), (0, 2), (1, 1)),
    ((2, 3, 8, 9), (2, 3, 3, 2), (2, 1), (1, 0), (1, 1)),
    ((3, 2, 9, 8), (2, 2, 3, 3), (2, 2), (1, 1), (1, 1)),
    ((2, 2, 9, 10), (3, 2, 3, 2), (1, 1), (2, 1), (2, 3)),
    ((2, 3, 11, 9), (2, 3, 3, 3), (3, 2), (0, 1), (2, 1)),
    ((2, 5, 4, 6), (3, 5, 1, 1), (1, 1), (0, 0), (1, 1)),
    ((2, 3, 5, 7), (4, 3, 1, 1), (2, 2), (0, 0), (1, 1)),
    ((1, 1, 6, 6), (1, 1, 6, 6), (1, 1), (0, 0), (1, 1)),
    # More rows (C * kh * kw) than columns per sample: the weight's gradient takes one GEMM
    # over a chunk's samples side by side, strided and 1x1 too.
    ((3, 8, 7, 6), (3, 8, 3, 3), (2, 2), (1, 1), (1, 1)),
    ((2, 6, 2, 2), (3, 6, 1, 1), (1, 1), (0, 0), (1, 1)),
    # Stride 1: the input's gradient is a correlation of g (no col2im), dilated and odd-sized
    # too; with a padding as wide as the kernel on one axis, or a kernel as big as the image
    # (above), it folds columns instead.
    ((1, 4, 6, 5), (5, 4, 3, 3), (1, 1), (1, 1), (2, 2)),
    ((3, 7, 11, 13), (5, 7, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 3, 5, 6), (2, 3, 2, 2), (1, 1), (2, 1), (1, 1)),
]
CONV_IDS = [f"x{x}-w{w}-s{s}-p{p}-d{d}" for x, w, s, p, d in CONV_CASES]


@pytest.fixture(autouse=True)
def float64():
    previous = mg.get_default_dtype()
    mg.set_default_dtype(np.float64)
    yield
    mg.set_default_dtype(previous)


@pytest.fixture(autouse=True)
def numpy_kernels_only():
    """These tests hold the numpy kernels' own paths; oneDNN's, which float32 calls take
    where it is installed, are held in tests/kernels/test_onednn.py."""
    with mg.backends.mkldnn.flags(enabled=False):
        yield


@pytest.fixture(params=["one-chunk", "chunk-per-sample", "kernel-rows", "columns"])
def chunking(request, monkeypatch):
    """Run each case with the whole batch as one chunk, a sample at a time, and with the
    stride-1 columns copied for one kernel row (one GEMM per kernel row) at any size; 3x3
    stride-1 convolutions and 3x3 or 5x5 weight gradients take their direct loops in the
    first two, columns in the last two."""
    per_sample = request.param == "chunk-per-sample"
    monkeypatch.setattr(conv_kernels, "_CHUNK_BYTES", 1 if per_sample else 1 << 30)
    monkeypatch.setattr(conv_kernels, "_DIRECT_CHUNK_BYTES", 1 if per_sample else 1 << 30)
    monkeypatch.setattr(conv_kernels, "_MIN_CHUNKS", 1)
    monkeypatch.setattr(conv_kernels, "_ROW_GEMM_FROM",
                        1 if request.param == "kernel-rows" else 1 << 30)
    _take("columns" if request.param in ("kernel-rows", "columns") else "direct",
          monkeypatch)


def _general_conv(x, weight, bias, stride, padding, dilation):
    """Convolution as the general path builds it: unfold, one matrix product, bias."""
    n = x.shape[0]
    oh, ow = conv_ops.sliding_output_size(x.shape[2:], weight.shape[2:], dilation, padding,
                                          stride)
    cols = F.unfold(x, weight.shape[2:], dilation, padding, stride)
    out = weight.reshape(weight.shape[0], -1) @ cols + bias.reshape(-1, 1)
    return out.reshape(n, weight.shape[0], oh, ow)


def _leaves(rng, *shapes):
    return [mg.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation", CONV_CASES, ids=CONV_IDS)
def test_conv2d_matches_the_general_path(x_shape, w_shape, stride, padding, dilation,
                                         chunking):
    rng = np.random.default_rng(0)
    x, w, b = _leaves(rng, x_shape, w_shape, w_shape[:1])
    fast = conv_ops.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation)
    general = _general_conv(x, w, b, stride, padding, dilation)
    np.testing.assert_allclose(fast.data, general.data, **TOL)
    g = mg.tensor(rng.standard_normal(fast.shape))
    fast_grads = mg.autograd.grad(fast, (x, w, b), g)
    general_grads = mg.autograd.grad(general, (x, w, b), g)
    for name, a, e in zip("xwb", fast_grads, general_grads):
        np.testing.assert_allclose(a.data, e.data, **TOL, err_msg=f"gradient of {name}")


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation", CONV_CASES, ids=CONV_IDS)
def test_conv2d_matches_torch(x_shape, w_shape, stride, padding, dilation, chunking):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, w, b = _leaves(rng, x_shape, w_shape, w_shape[:1])
    tx, tw, tb = (torch.tensor(t.detach().numpy().copy(), requires_grad=True) for t in (x, w, b))
    out = F.conv2d(x, w, b, stride, padding, dilation)
    tout = torch.nn.functional.conv2d(tx, tw, tb, stride, padding, dilation)
    np.testing.assert_allclose(out.data, tout.detach().numpy(), **TOL)
    g = rng.standard_normal(out.shape)
    out.backward(mg.tensor(g))
    tout.backward(torch.tensor(g))
    for name, ours, theirs in zip("xwb", (x, w, b), (tx, tw, tb)):
        np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), **TOL,
                                   err_msg=f"gradient of {name}")


def test_conv2d_reads_non_contiguous_and_float32_inputs():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((5, 6, 3, 2))
    x = mg.tensor(data).permute(3, 2, 0, 1)  # (2, 3, 5, 6), rows not contiguous
    w = mg.tensor(rng.standard_normal((4, 3, 3, 2)))
    # No padding: the columns are read from x itself, so its rows must be made contiguous.
    expected = _general_conv(x, w, mg.zeros(4), (1, 1), (0, 0), (1, 1))
    np.testing.assert_allclose(F.conv2d(x, w).data, expected.data, **TOL)
    single = F.conv2d(x.float(), w.float())
    assert single.dtype == np.float32
    np.testing.assert_allclose(single.data, expected.data, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation", CONV_CASES, ids=CONV_IDS)
def test_input_gradient_folds_columns_with_stride_a_padding_past_the_kernel_or_a_small_g(
        x_shape, w_shape, stride, padding, dilation, monkeypatch):
    folds = collections.Counter()
    fold_into = conv_kernels._fold_into
    monkeypatch.setattr(conv_kernels, "_fold_into",
                        lambda *args: folds.update(["fold"]) or fold_into(*args))
    rng = np.random.default_rng(4)
    out_size = conv_ops.sliding_output_size(x_shape[2:], w_shape[2:], dilation, padding,
                                            stride)
    g = rng.standard_normal(x_shape[:1] + w_shape[:1] + out_size)
    conv_kernels.conv_transpose2d(g, rng.standard_normal(w_shape), x_shape[2:], stride,
                                  padding, dilation)
    extent = conv_kernels.kernel_extent(w_shape[2:], dilation)
    growth = x_shape[2] * x_shape[3] / (out_size[0] * out_size[1])
    correlation = (stride == (1, 1) and all(p < e for p, e in zip(padding, extent))
                   and growth <= conv_kernels._CORRELATION_MAX_GROWTH)
    assert bool(folds) != correlation


def test_conv2d_gradients_read_non_contiguous_inputs():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = mg.tensor(rng.standard_normal((9, 8, 3, 2))).permute(2, 3, 0, 1)  # (3, 2, 9, 8)
    w = mg.tensor(rng.standard_normal((3, 4, 3, 3)))[:, ::2]  # (3, 2, 3, 3), strided
    g = mg.tensor(rng.standard_normal((6, 9, 3, 3))).permute(2, 3, 1, 0)  # (3, 3, 9, 6)
    geometry = ((1, 1), (1, 0), (1, 1))
    tx, tw, tg = (torch.tensor(t.numpy().copy()) for t in (x, w, g))
    expected = torch.ops.aten.convolution_backward(tg, tx, tw, None, [1, 1], [1, 0], [1, 1],
                                                   False, [0, 0], 1, [True, True, False])
    dx = conv_kernels.conv_transpose2d(g._array, w._array, (9, 8), *geometry)
    dw = conv_kernels.conv2d_weight(x._array, g._array, (3, 3), *geometry)
    np.testing.assert_allclose(dx, expected[0].numpy(), **TOL)
    np.testing.assert_allclose(dw, expected[1].numpy(), **TOL)


# Largest error relative to the largest exact value, float32 against float64, of the
# convolutions that take columns (not Winograd): torch's own float32 ones are off by 1.5e-7
# to 2.6e-6 on these cases, mpigrad's by 1.2e-7 to 6e-7.
COLUMNS_FLOAT32_TOL = 2e-6


@pytest.mark.parametrize("n,c,o,size,k,stride,padding",
                         [(4, 16, 16, 32, 3, 1, 1), (3, 16, 32, 17, 3, 2, 1),
                          (2, 16, 32, 16, 1, 2, 0), (2, 3, 16, 15, 5, 1, 2)])
def test_convolution_with_columns_in_float32_is_as_accurate_as_torch(n, c, o, size, k, stride,
                                                                     padding):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((n, c, size, size))
    weight = rng.standard_normal((o, c, k, k)) / math.sqrt(k * k * c)
    geometry = ((stride, stride), (padding, padding), (1, 1))
    out_size = conv_ops.sliding_output_size((size, size), (k, k), *geometry[::-1])
    g = rng.standard_normal((n, o) + out_size)

    def ours(x, weight, g):
        return (conv_kernels.conv2d(x, weight, None, *geometry),
                conv_kernels.conv_transpose2d(g, weight, (size, size), *geometry),
                conv_kernels.conv2d_weight(x, g, (k, k), *geometry))

    def theirs(x, weight, g):
        x, weight, g = map(torch.from_numpy, (x, weight, g))
        dx, dw, _ = torch.ops.aten.convolution_backward(
            g, x, weight, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1,
            [True, True, False])
        return (torch.nn.functional.conv2d(x, weight, None, stride, padding).numpy(),
                dx.numpy(), dw.numpy())

    single = [a.astype(np.float32) for a in (x, weight, g)]
    for name, mine, torch_single, exact in zip(("output", "input's gradient",
                                                 "weight's gradient"), ours(*single),
                                                theirs(*single), theirs(x, weight, g)):
        assert mine.dtype == np.float32
        scale = np.abs(exact).max()
        error = np.abs(mine - exact).max() / scale
        torch_error = np.abs(torch_single - exact).max() / scale
        assert error < COLUMNS_FLOAT32_TOL, (name, error, torch_error)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation",
                         [CONV_CASES[i] for i in (0, 3, 4, 6)],
                         ids=[CONV_IDS[i] for i in (0, 3, 4, 6)])
@pytest.mark.parametrize("path", ["columns", "direct"])
def test_conv2d_family_is_differentiable_to_any_order(x_shape, w_shape, stride, padding,
                                                      dilation, path, monkeypatch):
    """conv2d's gradients are conv_transpose2d and conv2d_weight, whose own gradients are
    members of the same family: second derivatives of each member cover the third of conv2d."""
    _take(path, monkeypatch)
    rng = np.random.default_rng(3)
    small = (1,) + x_shape[1:]
    x, w, b = _leaves(rng, small, w_shape, w_shape[:1])
    geometry = dict(stride=stride, padding=padding, dilation=dilation)
    g, = _leaves(rng, conv_ops.conv2d(x, w, b, **geometry).shape)
    assert gradcheck(lambda x, w, b: conv_ops.conv2d(x, w, b, **geometry), (x, w, b))
    assert gradgradcheck(lambda x, w, b: conv_ops.conv2d(x, w, b, **geometry), (x, w, b))
    transpose = lambda g, w: conv_ops.conv_transpose2d(g, w, input_size=small[2:], **geometry)
    assert gradcheck(transpose, (g, w))
    assert gradgradcheck(transpose, (g, w))
    weight = lambda x, g: conv_ops.conv2d_weight(x, g, kernel_size=w_shape[2:], **geometry)
    assert gradcheck(weight, (x, g))
    assert gradgradcheck(weight, (x, g))


# ----------------------------------------------------------------------------- Winograd
# (batch, in channels, out channels, height, width, padding): 3x3 stride-1 convolutions that
# the Winograd path computes, with odd outputs whose last tiles overhang, batch 1,
# non-square and one-pixel images, padding 0 to 3 (over 2 the input's gradient takes
# columns), one channel and 64.
WINOGRAD_CASES = [
    (2, 3, 4, 7, 6, 1),
    (1, 2, 3, 9, 5, 0),
    (3, 1, 2, 5, 8, 2),
    (1, 1, 1, 1, 1, 1),
    (2, 2, 3, 4, 3, 3),
    (2, 64, 64, 10, 9, 1),
    (1, 64, 1, 6, 7, 2),
]
WINOGRAD_IDS = [f"n{n}-c{c}-o{o}-{h}x{w}-p{p}" for n, c, o, h, w, p in WINOGRAD_CASES]


@pytest.fixture
def winograd_everywhere(monkeypatch):
    """Take the Winograd path at any size, and count its calls."""
    _take("winograd", monkeypatch)
    return _counted(monkeypatch, "_winograd_conv2d", "_winograd_conv2d_weight")


def _counted(monkeypatch, *names):
    """Count the calls of conv_kernels' functions `names`, by name."""
    calls = collections.Counter()
    for name in names:
        original = getattr(conv_kernels, name)

        def counted(*args, _original=original, _name=name):
            calls[_name] += 1
            return _original(*args)
        monkeypatch.setattr(conv_kernels, name, counted)
    return calls


def _winograd_leaves(rng, n, c, o, h, w, p):
    x, weight, bias = _leaves(rng, (n, c, h, w), (o, c, 3, 3), (o,))
    g = mg.tensor(rng.standard_normal((n, o, h + 2 * p - 2, w + 2 * p - 2)))
    return x, weight, bias, g


@pytest.mark.parametrize("n,c,o,h,w,p", WINOGRAD_CASES, ids=WINOGRAD_IDS)
def test_winograd_matches_the_general_path_and_torch(n, c, o, h, w, p, chunking,
                                                     winograd_everywhere):
    rng = np.random.default_rng(7)
    x, weight, bias, g = _winograd_leaves(rng, n, c, o, h, w, p)
    geometry = ((1, 1), (p, p), (1, 1))
    out = conv_ops.conv2d(x, weight, bias, *geometry)
    grads = mg.autograd.grad(out, (x, weight, bias), g)
    # Forward, the input's gradient (unless the padding is over 2, or g is much smaller than
    # the image: then columns are folded) and the weight's.
    as_correlation = conv_kernels._correlation_fits((h, w), g.shape[2:], (1, 1), (p, p), (3, 3))
    assert as_correlation == (p <= 2 and h * w <= 2 * g.shape[2] * g.shape[3])
    assert winograd_everywhere == {"_winograd_conv2d": 1 + as_correlation,
                                   "_winograd_conv2d_weight": 1}
    general = _general_conv(x, weight, bias, *geometry)
    np.testing.assert_allclose(out.data, general.data, **TOL)
    for name, a, e in zip("xwb", grads, mg.autograd.grad(general, (x, weight, bias), g)):
        np.testing.assert_allclose(a.data, e.data, **TOL, err_msg=f"gradient of {name}")
    torch = pytest.importorskip("torch")
    tx, tw, tb = (torch.tensor(t.detach().numpy().copy(), requires_grad=True) for t in (x, weight, bias))
    tout = torch.nn.functional.conv2d(tx, tw, tb, padding=p)
    np.testing.assert_allclose(out.data, tout.detach().numpy(), **TOL)
    tout.backward(torch.tensor(g.detach().numpy()))
    for name, ours, theirs in zip("xwb", grads, (tx, tw, tb)):
        np.testing.assert_allclose(ours.data, theirs.grad.numpy(), **TOL,
                                   err_msg=f"gradient of {name}")


# Largest error relative to the largest exact value, float32 against float64. Torch's own
# float32 convolutions are off by 3e-7 to 1.2e-6 on these cases; Winograd's adds and
# halvings are as accurate, 3e-7 to 9e-7.
WINOGRAD_FLOAT32_TOL = 2e-6


@pytest.mark.parametrize("n,c,o,h,w,p", [(4, 64, 64, 16, 16, 1), (2, 128, 64, 9, 7, 1),
                                         (2, 256, 32, 8, 8, 0)])
def test_winograd_in_float32_is_as_accurate_as_torch(n, c, o, h, w, p, winograd_everywhere):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((n, c, h, w))
    weight = rng.standard_normal((o, c, 3, 3)) / math.sqrt(9 * c)
    g = rng.standard_normal((n, o, h + 2 * p - 2, w + 2 * p - 2))
    geometry = ((1, 1), (p, p), (1, 1))

    def results(x, weight, g):
        return (conv_kernels.conv2d(x, weight, None, *geometry),
                conv_kernels.conv_transpose2d(g, weight, (h, w), *geometry),
                conv_kernels.conv2d_weight(x, g, (3, 3), *geometry))

    single = results(*(a.astype(np.float32) for a in (x, weight, g)))
    exact = results(x, weight, g)  # float64: equal to the direct path's to 1e-10, as above
    assert winograd_everywhere == {"_winograd_conv2d": 4, "_winograd_conv2d_weight": 2}
    for name, ours, expected in zip(("output", "input's gradient", "weight's gradient"),
                                    single, exact):
        assert ours.dtype == np.float32
        error = np.abs(ours - expected).max() / np.abs(expected).max()
        assert error < WINOGRAD_FLOAT32_TOL, (name, error)


@pytest.mark.parametrize("p", [0, 1, 2])
def test_winograd_family_is_differentiable_to_any_order(p, winograd_everywhere):
    rng = np.random.default_rng(9)
    x, weight, bias, g = _winograd_leaves(rng, 1, 2, 2, 5, 4, p)
    g.requires_grad_(True)
    geometry = dict(stride=(1, 1), padding=(p, p), dilation=(1, 1))
    conv = lambda x, w, b: conv_ops.conv2d(x, w, b, **geometry)
    assert gradcheck(conv, (x, weight, bias)) and gradgradcheck(conv, (x, weight, bias))
    transpose = lambda g, w: conv_ops.conv_transpose2d(g, w, input_size=(5, 4), **geometry)
    assert gradcheck(transpose, (g, weight)) and gradgradcheck(transpose, (g, weight))
    weight_grad = lambda x, g: conv_ops.conv2d_weight(x, g, kernel_size=(3, 3), **geometry)
    assert gradcheck(weight_grad, (x, g)) and gradgradcheck(weight_grad, (x, g))
    assert winograd_everywhere["_winograd_conv2d"] and winograd_everywhere[
        "_winograd_conv2d_weight"]

def _take(path, monkeypatch):
    """Send stride-1 convolutions down `path`: "columns" (im2col and GEMMs), "winograd" (3x3)
    or "direct" (at any size: a 3x3 convolution, and so a stride-1 input gradient, from the
    padded images; a 3x3 or 5x5 weight gradient's dot products)."""
    if path == "winograd":
        monkeypatch.setattr(conv_kernels, "_WINOGRAD_FROM",
                            dict.fromkeys(conv_kernels._WINOGRAD_FROM, (1, 1)))
    elif path == "columns":
        monkeypatch.setattr(conv_kernels, "_DIRECT_MAX_PAIRS", 0)
        monkeypatch.setattr(conv_kernels, "_DIRECT_CONV_MAX_CHANNELS", 0)
    else:
        monkeypatch.setattr(conv_kernels, "COMPILED_FROM", 0)
        monkeypatch.setattr(conv_kernels, "_DIRECT_CONV_MIN_WIDTH", 0)


# (input shape, weight shape, stride, padding, path): every chunked path, each cut into
# several chunks: columns one GEMM per sample (stride 1 padded: the input's gradient a
# correlation; stride 2: folded), a 1x1 image-as-columns, the weight's gradient side by side
# (more rows than columns), one GEMM per kernel row (12 channels), the weight gradient's
# direct loop (an odd number of output channels too), and Winograd's three.
THREADED_CASES = [((5, 3, 9, 8), (4, 3, 3, 3), (1, 1), (1, 1), "columns"),
                  ((5, 12, 12, 11), (4, 12, 3, 3), (1, 1), (1, 1), "columns"),
                  ((5, 3, 9, 8), (4, 3, 3, 3), (2, 2), (1, 1), "columns"),
                  ((5, 4, 6, 7), (3, 4, 1, 1), (1, 1), (0, 0), "columns"),
                  ((6, 8, 5, 4), (3, 8, 3, 3), (2, 2), (1, 1), "columns"),
                  ((5, 3, 9, 8), (4, 3, 3, 3), (1, 1), (1, 1), "direct"),
                  ((5, 12, 12, 11), (5, 12, 3, 3), (1, 1), (0, 0), "direct"),
                  ((5, 2, 10, 9), (3, 2, 5, 5), (1, 1), (1, 1), "direct"),
                  ((5, 3, 9, 8), (4, 3, 3, 3), (1, 1), (1, 1), "winograd")]


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, path", THREADED_CASES)
def test_chunks_on_several_threads_give_the_bits_of_one(x_shape, w_shape, stride, padding,
                                                        path, monkeypatch):
    """Chunks are cut by size alone (here _MIN_CHUNKS's: two samples a chunk, the last one
    shorter for a batch of 5), so 2 and 3 threads (the pool of kernels/threads.py) compute
    the very bits one thread does, the weight's gradient summed in chunk order."""
    _take(path, monkeypatch)
    torch = pytest.importorskip("torch")
    chunked = collections.Counter()
    pooled = conv_kernels.run_chunks

    def counted(work, count):
        chunked[count > 1] += 1
        return pooled(work, count)
    monkeypatch.setattr(conv_kernels, "run_chunks", counted)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(np.float32)
    weight = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    geometry = (stride, padding, (1, 1))
    g = rng.standard_normal(conv_kernels.conv2d(x, weight, bias, *geometry).shape).astype(
        np.float32)
    before = mg.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            mg.set_num_threads(threads)
            results.append((conv_kernels.conv2d(x, weight, bias, *geometry),
                            conv_kernels.conv_transpose2d(g, weight, x_shape[2:], *geometry),
                            conv_kernels.conv2d_weight(x, g, w_shape[2:], *geometry)))
    finally:
        mg.set_num_threads(before)
    assert chunked[True] >= 3 * 3 and not chunked[False]
    for threaded in results[1:]:
        for one, other in zip(results[0], threaded):
            np.testing.assert_array_equal(one, other)
    direct = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(weight),
                                        torch.from_numpy(bias), stride, padding)
    np.testing.assert_allclose(results[1][0], direct.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels, stride, groups, path", [
    (3, 1, 1, "columns"), (12, 1, 1, "columns"), (4, 2, 1, "columns"), (4, 1, 1, "winograd"),
    (4, 1, 2, "columns"), (4, 1, 1, "direct")])
def test_an_empty_batch_gives_empty_outputs_and_zero_weight_gradients_as_torch(
        channels, stride, groups, path, monkeypatch):
    torch = pytest.importorskip("torch")
    _take(path, monkeypatch)
    x = mg.zeros(0, channels, 6, 5, requires_grad=True)
    weight = mg.tensor(np.ones((4, channels // groups, 3, 3)), requires_grad=True)
    out = F.conv2d(x, weight, None, stride, 1, 1, groups)
    expected = torch.nn.functional.conv2d(torch.zeros(0, channels, 6, 5),
                                          torch.ones(4, channels // groups, 3, 3), None, stride,
                                          1, 1, groups)
    assert tuple(out.shape) == tuple(expected.shape)
    out.sum().backward()
    assert tuple(x.grad.shape) == tuple(x.shape)
    np.testing.assert_array_equal(weight.grad.numpy(), np.zeros(weight.shape))


# ------------------------------------------------------- 3x3 and 5x5 weight gradient, direct
@pytest.fixture
def direct_calls(monkeypatch):
    """Count the calls of the direct loops (conv2d's and conv2d_weight's), taken at any
    size."""
    _take("direct", monkeypatch)
    return _counted(monkeypatch, "_conv2d_3x3", "_conv2d_weight_direct")


def _torch_weight_gradient(x, g, padding, k=3):
    """torch's weight gradient of a stride-1 k x k convolution; padding: one int or (ph, pw)."""
    torch = pytest.importorskip("torch")
    x, g = torch.from_numpy(x), torch.from_numpy(g)
    weight = torch.zeros((g.shape[1], x.shape[1], k, k), dtype=x.dtype)
    return torch.ops.aten.convolution_backward(g, x, weight, None, [1, 1],
                                               list(pair("padding", padding, 0)), [1, 1], False,
                                               [0, 0], 1, [False, True, False])[1].numpy()


# (batch, channels, output channels, height, width, padding, kernel): the ResNet's 3x3
# shapes and the tutorial CNN's 5x5 ones at batch 7 (a shorter last chunk), an odd number of
# output channels, no padding, a padding of 2, paddings that differ between the axes,
# non-square images, one channel.
DIRECT_CASES = [(7, 16, 16, 32, 32, 1, 3), (7, 32, 32, 16, 16, 1, 3), (5, 3, 16, 32, 32, 1, 3),
                (3, 5, 7, 9, 11, 0, 3), (3, 4, 3, 6, 13, 2, 3), (2, 1, 1, 5, 5, 1, 3),
                (3, 4, 5, 9, 11, (1, 2), 3), (3, 4, 5, 10, 7, (2, 0), 3),
                (7, 1, 10, 28, 28, 0, 5), (7, 10, 20, 12, 12, 0, 5), (3, 4, 3, 9, 11, 2, 5),
                (3, 4, 3, 9, 11, (0, 2), 5)]


@pytest.mark.parametrize("n,c,o,h,w,p,k", DIRECT_CASES)
def test_direct_weight_gradient_matches_torch_in_float64_and_float32(n, c, o, h, w, p, k,
                                                                     direct_calls):
    rng = np.random.default_rng(12)
    ph, pw = pair("padding", p, 0)
    x = rng.standard_normal((n, c, h, w))
    g = rng.standard_normal((n, o, h + 2 * ph - k + 1, w + 2 * pw - k + 1))
    exact = _torch_weight_gradient(x, g, p, k)
    geometry = ((k, k), (1, 1), (ph, pw), (1, 1))
    np.testing.assert_allclose(conv_kernels.conv2d_weight(x, g, *geometry), exact, **TOL)
    single = conv_kernels.conv2d_weight(x.astype(np.float32), g.astype(np.float32), *geometry)
    torch_single = _torch_weight_gradient(x.astype(np.float32), g.astype(np.float32), p, k)
    assert single.dtype == np.float32
    scale = np.abs(exact).max()
    error, torch_error = (np.abs(a - exact).max() / scale for a in (single, torch_single))
    assert error < COLUMNS_FLOAT32_TOL, (error, torch_error)
    assert direct_calls["_conv2d_weight_direct"] == 2


@pytest.mark.parametrize("n,c,o,h,w,p,k", [case for case in DIRECT_CASES if case[6] == 3])
def test_direct_convolution_and_input_gradient_match_torch(n, c, o, h, w, p, k, direct_calls):
    """The forward (with a bias, output channels not a multiple of four among the cases) and
    the stride-1 input gradient, a correlation of g that takes the same loop (unless it
    folds columns, padding over 2, or takes Winograd's, 32 channels)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(15)
    ph, pw = pair("padding", p, 0)
    x = rng.standard_normal((n, c, h, w))
    weight = rng.standard_normal((o, c, 3, 3)) / math.sqrt(9 * c)
    bias = rng.standard_normal(o)
    g = rng.standard_normal((n, o, h + 2 * ph - 2, w + 2 * pw - 2))
    geometry = ((1, 1), (ph, pw), (1, 1))

    def ours(x, weight, bias, g):
        return (conv_kernels.conv2d(x, weight, bias, *geometry),
                conv_kernels.conv_transpose2d(g, weight, (h, w), *geometry))

    def theirs(x, weight, bias, g):
        x, weight, bias, g = map(torch.from_numpy, (x, weight, bias, g))
        dx = torch.ops.aten.convolution_backward(g, x, weight, None, [1, 1], [ph, pw],
                                                 [1, 1], False, [0, 0], 1,
                                                 [True, False, False])[0]
        return torch.nn.functional.conv2d(x, weight, bias, 1, (ph, pw)).numpy(), dx.numpy()

    exact = theirs(x, weight, bias, g)
    for mine, expected in zip(ours(x, weight, bias, g), exact):
        np.testing.assert_allclose(mine, expected, **TOL)
    single = [a.astype(np.float32) for a in (x, weight, bias, g)]
    for mine, torch_single, expected in zip(ours(*single), theirs(*single), exact):
        assert mine.dtype == np.float32
        scale = np.abs(expected).max()
        error, torch_error = (np.abs(a - expected).max() / scale for a in (mine, torch_single))
        assert error < COLUMNS_FLOAT32_TOL, (error, torch_error)
    # Else folded (padding over 2), or Winograd's.
    by_this_loop = max(ph, pw) <= 2 and not conv_kernels.winograd_fits(
        "conv_transpose2d", weight.shape, (1, 1), (1, 1), (h, w))
    assert direct_calls["_conv2d_3x3"] == 2 * (1 + by_this_loop)


def test_direct_weight_gradient_reads_strided_and_half_inputs(direct_calls):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((9, 8, 4, 3)).transpose(2, 3, 0, 1)  # (4, 3, 9, 8)
    g = rng.standard_normal((4, 4, 9, 8))[:, ::2, :, ::-1]  # (4, 2, 9, 8), columns reversed
    np.testing.assert_allclose(
        conv_kernels.conv2d_weight(x, g, (3, 3), (1, 1), (1, 1), (1, 1)),
        _torch_weight_gradient(np.ascontiguousarray(x), np.ascontiguousarray(g), 1), **TOL)
    half = conv_kernels.conv2d_weight(x.astype(np.float16), g.astype(np.float16), (3, 3),
                                      (1, 1), (1, 1), (1, 1))
    assert half.dtype == np.float16
    np.testing.assert_allclose(
        half, _torch_weight_gradient(x.astype(np.float16).astype(np.float64),
                                     g.astype(np.float16).astype(np.float64), 1),
        rtol=2e-3, atol=2e-2)
    assert direct_calls["_conv2d_weight_direct"] == 2


@pytest.mark.parametrize("path", ["direct", "winograd", "columns"])
def test_bfloat16_images_give_bfloat16_from_every_path(path, monkeypatch):
    """The kernels run bfloat16 in float32 and hand the result back in bfloat16 (ml_dtypes'
    kind is "V", not "f": a kind test let float32 through), as torch keeps the dtype."""
    torch = pytest.importorskip("torch")
    _take(path, monkeypatch)
    rng = np.random.default_rng(17)
    x, w = rng.standard_normal((2, 3, 8, 8)), rng.standard_normal((4, 3, 3, 3))
    g = rng.standard_normal((2, 4, 8, 8))
    tx, tw, tg = (torch.from_numpy(a) for a in (x, w, g))
    input_gradient, weight_gradient, _ = torch.ops.aten.convolution_backward(
        tg, tx, tw, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    geometry = (1, 1), (1, 1), (1, 1)
    x, w, g = (a.astype(bfloat16) for a in (x, w, g))
    results = {
        "forward": (conv_kernels.conv2d(x, w, None, *geometry),
                    torch.nn.functional.conv2d(tx, tw, padding=1)),
        "input gradient": (conv_kernels.conv_transpose2d(g, w, (8, 8), *geometry),
                           input_gradient),
        "weight gradient": (conv_kernels.conv2d_weight(x, g, (3, 3), *geometry),
                            weight_gradient),
    }
    for what, (mine, exact) in results.items():
        assert mine.dtype == bfloat16, what
        np.testing.assert_allclose(mine.astype(np.float64), exact.numpy(), rtol=0.05, atol=0.3,
                                   err_msg=what)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the poisoned call's 0 * inf
def test_direct_weight_gradient_keeps_no_value_from_an_earlier_call(monkeypatch):
    """The loop reads the work arrays' zero borders and, for a shorter last chunk, the first
    rows of the next sample's slot: what another call's full chunk wrote there must not
    count, whichever order the chunks run in (run_chunks promises none)."""
    def reversed_chunks(work, count):
        done = {k: work(k) for k in reversed(range(count))}
        return [done[k] for k in range(count)]
    monkeypatch.setattr(conv_kernels, "run_chunks", reversed_chunks)
    rng = np.random.default_rng(14)
    x = rng.standard_normal((5, 3, 6, 7)).astype(np.float32)
    g = rng.standard_normal((5, 4, 6, 7)).astype(np.float32)
    clean = conv_kernels._conv2d_weight_direct(x, g, 3, (1, 1))
    poisoned = x.copy()
    poisoned[:, :, 0, :2] = np.inf
    conv_kernels._conv2d_weight_direct(poisoned, g, 3, (1, 1))
    np.testing.assert_array_equal(conv_kernels._conv2d_weight_direct(x, g, 3, (1, 1)), clean)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("k, p", [(3, 0), (5, 0)])
def test_a_non_finite_input_gives_torchs_non_finite_weight_gradient_taps(k, p, direct_calls):
    """The direct loop multiplies the grid's cells without outputs by zero; where x holds an
    inf that makes nans torch does not have, so the columns compute such inputs. (Padded,
    the columns' own junk columns still add a nan or two torch does not have: not here.)"""
    rng = np.random.default_rng(16)
    x = rng.standard_normal((6, 2, 12, 12))
    x[0, 0, -1, -1] = np.inf
    g = rng.standard_normal((6, 4, 12 + 2 * p - k + 1, 12 + 2 * p - k + 1))
    ours = conv_kernels.conv2d_weight(x, g, (k, k), (1, 1), (p, p), (1, 1))
    theirs = _torch_weight_gradient(x, g, p, k)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs))
    finite = np.isfinite(theirs)
    np.testing.assert_allclose(ours[finite], theirs[finite], **TOL)
    assert direct_calls["_conv2d_weight_direct"] == 1


# ----------------------------------------------------------------------------- max pooling
# (input shape, kernel, stride, padding, dilation, ceil_mode): kernel == stride (disjoint
# windows, written not added), overlapping windows, padding, dilation, non-square, ceil_mode.
POOL_CASES = [
    ((2, 3, 8, 6), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((1, 2, 9, 7), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((2, 2, 9, 8), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((2, 2, 7, 9), (2, 3), (1, 2), (1, 0), (1, 1), False),
    ((1, 3, 9, 9), (3, 3), (1, 1), (0, 0), (2, 2), False),
    ((2, 2, 9, 8), (3, 3), (2, 2), (0, 0), (1, 1), True),
    ((2, 2, 8, 7), (2, 2), (2, 2), (1, 1), (1, 1), True),
    ((1, 1, 10, 9), (3, 2), (3, 2), (1, 0), (1, 2), True),
]
POOL_IDS = [f"x{x}-k{k}-s{s}-p{p}-d{d}-ceil{c}" for x, k, s, p, d, c in POOL_CASES]


def _general_max_pool(x, kernel_size, stride, padding, dilation, ceil_mode):
    """Max pooling the general way: pad with -inf, unfold each plane, max over the taps."""
    n, c, h, w = x.shape
    _, (eh, ew) = _pool_geometry("max_pool2d", (h, w), kernel_size, stride, padding, dilation,
                                 ceil_mode)
    (ph, pw) = padding
    planes = ops.pad(x.reshape(n * c, 1, h, w), (pw, pw + ew, ph, ph + eh), value=-math.inf)
    cols = F.unfold(planes, kernel_size, dilation, 0, stride)
    values, _ = cols.max(dim=1)
    oh, ow = conv_ops.sliding_output_size(planes.shape[2:], kernel_size, dilation, (0, 0),
                                          stride)
    return values.reshape(n, c, oh, ow)


def _distinct(shape, rng):
    # Distinct values, so every window has one maximum and finite differences see no kink.
    return mg.tensor(rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0,
                     requires_grad=True)


@pytest.mark.parametrize("shape,kernel_size,stride,padding,dilation,ceil_mode", POOL_CASES,
                         ids=POOL_IDS)
def test_max_pool2d_matches_the_general_path_and_torch(shape, kernel_size, stride, padding,
                                                       dilation, ceil_mode):
    rng = np.random.default_rng(4)
    data = rng.standard_normal(shape)
    data[0, 0, :2, :2] = 0.5  # a tie: the first maximum wins in all three
    x = mg.tensor(data, requires_grad=True)
    args = (kernel_size, stride, padding, dilation, ceil_mode)
    fast = F.max_pool2d(x, *args)
    general = _general_max_pool(x, *args)
    np.testing.assert_array_equal(fast.data, general.data)
    g = mg.tensor(rng.standard_normal(fast.shape))
    grad, = mg.autograd.grad(fast, x, g)
    np.testing.assert_allclose(grad.data, mg.autograd.grad(general, x, g)[0].data, **TOL)
    torch = pytest.importorskip("torch")
    tx = torch.tensor(data, requires_grad=True)
    tout = torch.nn.functional.max_pool2d(tx, *args)
    np.testing.assert_array_equal(fast.data, tout.detach().numpy())
    tout.backward(torch.tensor(g.detach().numpy()))
    np.testing.assert_allclose(grad.data, tx.grad.numpy(), **TOL)


def test_max_pool2d_after_relu_sends_tied_zeros_gradient_where_torch_does():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    data = rng.standard_normal((2, 3, 6, 6))
    x = mg.tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    out = F.max_pool2d(F.relu(x) * 1.0, 2)  # many all-zero windows
    tout = torch.nn.functional.max_pool2d(torch.relu(tx) * 1.0, 2)
    inner = F.max_pool2d(F.relu(x), 2, return_indices=True)[1]
    tinner = torch.nn.functional.max_pool2d(torch.relu(tx), 2, return_indices=True)[1]
    np.testing.assert_array_equal(inner.data, tinner.numpy())
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_array_equal(x.grad.data, tx.grad.numpy())


@pytest.mark.parametrize("shape,kernel_size,stride,padding,dilation,ceil_mode",
                         POOL_CASES + [((3, 10, 24, 24), (2, 2), (2, 2), (0, 0), (1, 1), False)],
                         ids=POOL_IDS + ["cnn-first-pool"])
def test_max_pool2d_in_float32_gives_torch_s_maxima_indices_and_gradient(
        shape, kernel_size, stride, padding, dilation, ceil_mode):
    """nan windows (the last nan wins), windows of -inf whose other taps are padding (the
    first tap inside the image wins, as in torch's kernel) and ties, through the fused
    backward."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    data = rng.standard_normal(shape).astype(np.float32)
    data[0, 0, :3, :3] = -np.inf
    data[-1, -1, 1, :] = np.nan
    data[0, -1, 2:4, 2:4] = 0.25
    args = (kernel_size, stride, padding, dilation, ceil_mode)
    x = mg.tensor(data, requires_grad=True)
    out, indices = F.max_pool2d(x, *args, return_indices=True)
    tx = torch.tensor(data, requires_grad=True)
    tout, tindices = torch.nn.functional.max_pool2d(tx, *args, return_indices=True)
    np.testing.assert_array_equal(out.data, tout.detach().numpy())
    np.testing.assert_array_equal(indices.data, tindices.numpy())
    g = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(mg.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_max_pool2d_s_fused_backward_gives_the_rules_gradient():
    """The winners kept by the forward against the rules' (create_graph), which find them
    again: overlapping windows, so cells add several windows' gradients."""
    rng = np.random.default_rng(9)
    x = mg.tensor(rng.standard_normal((2, 3, 9, 8)), requires_grad=True)
    out = F.max_pool2d(x, 3, 2, 1, ceil_mode=True)
    g = mg.tensor(rng.standard_normal(out.shape), requires_grad=True)
    fused, = mg.autograd.grad(out, x, g, retain_graph=True)
    composed, = mg.autograd.grad(out, x, g, create_graph=True)
    assert composed.requires_grad and not fused.requires_grad
    np.testing.assert_array_equal(fused.data, composed.data)


def test_a_pooling_window_with_no_tap_inside_gives_torchs_value_and_no_gradient():
    """A dilated kernel over a small padded image: the window's taps all lie in the padding
    or past the image. torch answers -inf (an integer type's lowest); its index then points
    outside the image (ours does too, elsewhere), and its backward adds the gradient there,
    out of the input's bounds (torch 2.13 corrupts its heap: not run here). Ours sends it
    nowhere."""
    torch = pytest.importorskip("torch")
    data = np.arange(4.0).reshape(1, 1, 2, 2)
    x = mg.tensor(data, requires_grad=True)
    out = F.max_pool2d(x, 2, 1, 1, 3)
    np.testing.assert_array_equal(
        out.data, torch.nn.functional.max_pool2d(torch.tensor(data), 2, 1, 1, 3).numpy())
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.data, np.zeros((1, 1, 2, 2)))
    whole = np.arange(16).reshape(1, 1, 4, 4)  # some windows with taps inside, some without
    np.testing.assert_array_equal(
        F.max_pool2d(mg.tensor(whole), 2, 1, 1, 3).data,
        torch.nn.functional.max_pool2d(torch.tensor(whole), 2, 1, 1, 3).numpy())


def test_max_pool2d_compares_integers_exactly():
    torch = pytest.importorskip("torch")
    data = (2 ** 60 + np.random.default_rng(10).permutation(2 * 36)).reshape(1, 2, 6, 6)
    out = F.max_pool2d(mg.tensor(data), 3, 2, 1)
    expected = torch.nn.functional.max_pool2d(torch.tensor(data), 3, 2, 1).numpy()
    assert out.dtype == mg.int64
    np.testing.assert_array_equal(out.data, expected)


@pytest.mark.parametrize("shape,kernel_size,stride,padding,dilation,ceil_mode",
                         [POOL_CASES[i] for i in (0, 2, 5)], ids=[POOL_IDS[i] for i in (0, 2, 5)])
def test_max_pool2d_is_differentiable_to_any_order(shape, kernel_size, stride, padding,
                                                   dilation, ceil_mode):
    rng = np.random.default_rng(6)
    x = _distinct((1,) + shape[1:], rng)
    pool = lambda x: F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)
    assert gradcheck(pool, (x,))
    assert gradgradcheck(pool, (x,))
    # Its gradient routes g to the winners (tap_scatter) and back (tap_gather): both linear
    # in g, each the other's adjoint.
    out = pool(x)
    extra = _pool_geometry("max_pool2d", shape[2:], kernel_size, stride, padding, dilation,
                           ceil_mode)[1]
    winners = conv_ops.winning_taps(x._array, kernel_size, stride, padding, dilation, extra)
    geometry = dict(winners=winners, kernel_size=kernel_size, stride=stride, padding=padding,
                    dilation=dilation, extra=extra)
    g = mg.tensor(rng.standard_normal(out.shape), requires_grad=True)
    scatter = lambda g: conv_ops.tap_scatter(g, input_size=shape[2:], **geometry)
    gather = lambda x: conv_ops.tap_gather(x, **geometry)
    assert gradcheck(scatter, (g,)) and gradgradcheck(scatter, (g,))
    assert gradcheck(gather, (x,)) and gradgradcheck(gather, (x,))
    np.testing.assert_array_equal(gather(x).data, out.data)


def test_max_pool_chunks_on_several_threads_give_the_bits_of_one(monkeypatch):
    """Pooling's chunks follow the thread count (its passes are exact); overlapping windows
    (added gradients), ceil_mode and a nan included."""
    monkeypatch.setattr(conv_kernels, "_CHUNK_BYTES", 500)  # several chunks on one thread too
    rng = np.random.default_rng(12)
    x = rng.standard_normal((7, 3, 9, 8)).astype(np.float32)
    x[2, 1, 4, 4] = np.nan
    geometry = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                    extra=(1, 0))
    before = mg.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            mg.set_num_threads(threads)
            out, winners = conv_kernels.max_pool2d(x, **geometry)
            g = np.arange(out.size, dtype=np.float32).reshape(out.shape)
            results.append((out, winners, conv_kernels.tap_scatter(g, winners, x.shape[2:],
                                                                   **geometry)))
    finally:
        mg.set_num_threads(before)
    for threaded in results[1:]:
        for one, other in zip(results[0], threaded):
            np.testing.assert_array_equal(one, other)
