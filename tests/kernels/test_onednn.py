"""The float32 convolutions and linear's products on oneDNN (mpigrad/kernels/onednn)
against torch: forward, both gradients and tangents, second order through the rules,
geometries oneDNN is given as left and right paddings; the switches (backends.mkldnn, MPIGRAD_ONEDNN), threads, forks, and
what happens where oneDNN cannot be loaded."""
import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad.kernels import onednn  # noqa: E402
from mpigrad.kernels.onednn import conv as onednn_conv  # noqa: E402
from mpigrad.kernels.onednn import matmul as onednn_matmul  # noqa: E402

from .torch_check import check  # noqa: E402

F = mg.nn.functional
TF = torch.nn.functional

needs_onednn = pytest.mark.skipif(not mg.backends.mkldnn.is_available(),
                                  reason=f"oneDNN: {onednn.unavailable_reason()}")


@pytest.fixture
def onednn_calls(monkeypatch):
    """The kinds of oneDNN primitives run while the test runs."""
    calls = []
    run = onednn_conv._run

    def counted(kind, *args, **kwargs):
        out = run(kind, *args, **kwargs)
        if out is not None:
            calls.append(kind)
        return out
    monkeypatch.setattr(onednn_conv, "_run", counted)
    return calls


# (x shape, weight shape, stride, padding, dilation): torch's padding is per axis and the same
# on both sides; oneDNN's right padding is what makes torch's (rounded down) output size.
CASES = [((4, 16, 12, 12), (16, 16, 3, 3), 1, 1, 1),
         ((3, 16, 11, 9), (12, 16, 3, 3), 2, 1, 1),
         ((2, 17, 13, 10), (10, 17, 5, 5), (2, 3), (1, 2), 1),
         ((2, 16, 10, 11), (8, 16, 3, 3), 1, (2, 0), 2),
         ((3, 8, 11, 9), (12, 8, 3, 3), 2, 1, 1),
         ((5, 3, 8, 8), (16, 3, 3, 3), 1, 1, 1),
         ((1, 10, 7, 7), (4, 10, 2, 3), 3, 0, 1),
         ((2, 1, 12, 12), (10, 1, 5, 5), 1, 0, 1)]


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("x_shape, w_shape, stride, padding, dilation", CASES)
def test_conv2d_on_onednn_matches_torch(x_shape, w_shape, stride, padding, dilation, bias,
                                        threads, onednn_calls, restore_threads):
    mg.set_num_threads(threads)
    rng = np.random.default_rng(0)
    # Scaled so that the weight's gradient, a sum over the batch and the image, stays within
    # torch's absolute float32 tolerance of 1e-5.
    arrays = [0.3 * rng.standard_normal(x_shape), 0.3 * rng.standard_normal(w_shape)]
    arrays += [rng.standard_normal(w_shape[0])] if bias else []

    def run(functional):
        return lambda x, w, *b: functional.conv2d(x, w, *(b or [None]), stride=stride,
                                                  padding=padding, dilation=dilation)
    check(run(F), run(TF), arrays, np.float32)
    # The gradients stay with the numpy kernels for few input channels; on several threads
    # oneDNN takes every weight's gradient.
    assert "forward" in onednn_calls
    assert ("data" in onednn_calls) == (w_shape[1] >= 8)
    assert ("weights" in onednn_calls) == (w_shape[1] >= (16 if threads == 1 else 1))


@needs_onednn
def test_non_contiguous_inputs_and_a_float64_bias(onednn_calls):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 9, 16, 12)).astype(np.float32)
    w = rng.standard_normal((10, 3, 3, 9)).astype(np.float32)
    b = rng.standard_normal(10)
    ours = F.conv2d(mg.tensor(x)[:, :, ::2].transpose(2, 3), mg.tensor(w).permute(0, 3, 1, 2),
                    mg.tensor(b.astype(np.float32)), padding=1)
    theirs = TF.conv2d(torch.tensor(x)[:, :, ::2].transpose(2, 3),
                       torch.tensor(w).permute(0, 3, 1, 2), torch.tensor(b, dtype=torch.float32),
                       padding=1)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1.3e-6, atol=1e-5)
    assert onednn_calls == ["forward"]


@needs_onednn
@pytest.mark.parametrize("output_padding", [0, 1])
def test_conv_transpose2d_with_output_padding(output_padding, onednn_calls):
    """The input's gradient kernel with an input larger than the forward of it covers: the
    rows past the last window get oneDNN's negative right padding."""
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((2, 8, 6, 7)), rng.standard_normal((8, 16, 3, 3)),
              rng.standard_normal(16)]

    def run(functional):
        return lambda g, w, b: functional.conv_transpose2d(g, w, b, stride=2, padding=1,
                                                           output_padding=output_padding)
    check(run(F), run(TF), arrays, np.float32)
    assert "data" in onednn_calls


@needs_onednn
def test_second_order_through_the_rules_matches_torch(onednn_calls):
    rng = np.random.default_rng(3)
    x_array = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
    w_array = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
    results = []
    for lib in (mg, torch):
        x = lib.tensor(x_array, requires_grad=True)
        w = lib.tensor(w_array, requires_grad=True)
        y = lib.nn.functional.conv2d(x, w, padding=1, stride=2)
        gx, gw = lib.autograd.grad((y ** 2).sum(), (x, w), create_graph=True)
        results.append([t.detach().numpy() for t in
                        (gx, gw, *lib.autograd.grad((gx ** 2).sum() + gw.sum(), (x, w)))])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-4)
    assert {"forward", "data", "weights"} <= set(onednn_calls)


@needs_onednn
def test_disabled_by_the_flag_the_numpy_kernels_compute_it(onednn_calls):
    rng = np.random.default_rng(4)
    x = mg.tensor(rng.standard_normal((2, 8, 8, 8)).astype(np.float32))
    w = mg.tensor(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
    on = F.conv2d(x, w, padding=1)
    with mg.backends.mkldnn.flags(enabled=False):
        assert not mg.backends.mkldnn.enabled
        off = F.conv2d(x, w, padding=1)
    assert mg.backends.mkldnn.enabled
    assert onednn_calls == ["forward"]
    np.testing.assert_allclose(on.numpy(), off.numpy(), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_float64_and_grouped_convolutions_stay_with_the_numpy_kernels(onednn_calls):
    rng = np.random.default_rng(5)
    x = mg.tensor(rng.standard_normal((2, 8, 8, 8)))
    F.conv2d(x, mg.tensor(rng.standard_normal((8, 8, 3, 3))), padding=1)
    F.conv2d(x.float(), mg.tensor(rng.standard_normal((8, 2, 3, 3)).astype(np.float32)),
             groups=4)
    F.conv2d(x.float(), mg.tensor(rng.standard_normal((8, 8, 1, 1)).astype(np.float32)))
    assert onednn_calls == []


@needs_onednn
def test_two_threads_agree_with_one_and_calls_from_several_threads_do_not_mix():
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((4, 16, 14, 14)).astype(np.float32) for _ in range(4)]
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    expected = [TF.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy() for x in xs]
    rows = rng.standard_normal((512, 256)).astype(np.float32)
    previous = mg.get_num_threads()
    try:
        mg.set_num_threads(2)  # products of 2^23 multiply-adds and more take both
        two = F.conv2d(mg.tensor(xs[0]), mg.tensor(w), padding=1).numpy()
        product = F.linear(mg.tensor(rows), mg.tensor(rows[:128])).numpy()
    finally:
        mg.set_num_threads(previous)
    np.testing.assert_allclose(two, expected[0], rtol=1.3e-6, atol=1e-5)
    np.testing.assert_allclose(product, TF.linear(torch.tensor(rows),
                                                  torch.tensor(rows[:128])).numpy(),
                               rtol=1.3e-6, atol=1e-4)

    results = [None] * len(xs)

    def convolve(i):
        for _ in range(5):
            results[i] = F.conv2d(mg.tensor(xs[i]), mg.tensor(w), padding=1).numpy()
    workers = [threading.Thread(target=convolve, args=(i,)) for i in range(len(xs))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for ours, theirs in zip(results, expected):
        np.testing.assert_allclose(ours, theirs, rtol=1.3e-6, atol=1e-5)


@pytest.fixture
def gemm_calls(monkeypatch):
    """The (a, b) shapes of the oneDNN products run while the test runs."""
    calls = []
    gemm = onednn.Library.gemm

    def counted(self, a, b, out):
        calls.append((a.shape, b.shape))
        return gemm(self, a, b, out)
    monkeypatch.setattr(onednn.Library, "gemm", counted)
    return calls


@pytest.fixture
def linear_calls(monkeypatch):
    """The (rows, inner, columns) of the forwards oneDNN's matmul primitive ran."""
    calls = []
    linear = onednn_matmul.linear

    def counted(x, weight, bias):
        out = linear(x, weight, bias)
        if out is not None:
            calls.append((*x.shape, weight.shape[0]))
        return out
    monkeypatch.setattr(onednn_matmul, "linear", counted)
    return calls


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape, features", [((96, 128), 256), ((4, 30, 128), 300),
                                               ((2, 3, 50), 7)])
def test_linear_on_onednn_matches_torch(x_shape, features, bias, gemm_calls, linear_calls):
    """From 1M multiply-adds linear's forward runs on oneDNN's matmul primitive (the weight
    read as a transposed view) and its two gradient products (g W, and g^T x on a transposed
    operand) on its sgemm; smaller ones stay with numpy's BLAS."""
    rng = np.random.default_rng(9)
    arrays = [0.5 * rng.standard_normal(x_shape),
              0.1 * rng.standard_normal((features, x_shape[-1]))]
    arrays += [rng.standard_normal(features)] if bias else []
    check(F.linear, TF.linear, arrays, np.float32)
    rows = int(np.prod(x_shape[:-1]))
    large = rows * x_shape[-1] * features >= 1 << 20
    # check() runs the forward three times (gradients twice, tangents once) and backward twice
    assert linear_calls == (3 * [(rows, x_shape[-1], features)] if large else [])
    assert sorted(gemm_calls) == sorted(2 * [((rows, features), (features, x_shape[-1])),
                                             ((features, rows), (rows, x_shape[-1]))]
                                        if large else [])


@needs_onednn
def test_float64_products_stay_with_numpys_blas(gemm_calls, linear_calls):
    rng = np.random.default_rng(10)
    check(F.linear, TF.linear, [rng.standard_normal((64, 128)),
                                rng.standard_normal((256, 128))], np.float64)
    check(mg.matmul, torch.matmul, [rng.standard_normal((3, 200, 100)),
                                    rng.standard_normal((100, 64))], np.float64)
    assert gemm_calls == [] and linear_calls == []


@needs_onednn
@pytest.mark.parametrize("a_shape, b_shape, on_onednn", [
    ((256, 100), (100, 64), True),
    ((3, 200, 100), (100, 64), True),  # a stack times a matrix: one folded product
    ((3, 200, 100), (3, 100, 64), False),  # a batch of products: numpy's, each under 1M
    ((20, 30), (30, 40), False)])
def test_matmul_s_float32_products_on_onednn_match_torch(a_shape, b_shape, on_onednn,
                                                          gemm_calls):
    """The matmul op's products run where linear's gradients run, so that a float32 step's
    threads are one OpenMP team; so do the gradients' products (matmuls themselves)."""
    rng = np.random.default_rng(11)
    # Scaled so that b's gradient of the stack, 600 rows summed (in another order than
    # torch's), stays within torch's absolute float32 tolerance of 1e-5.
    check(mg.matmul, torch.matmul, [0.1 * rng.standard_normal(a_shape),
                                    0.1 * rng.standard_normal(b_shape)], np.float32)
    assert bool(gemm_calls) == on_onednn
    rows = int(np.prod(a_shape[:-1]))
    if on_onednn:  # the forward's folded product is among them
        assert ((rows, a_shape[-1]), b_shape) in gemm_calls


def _convolve_in_child(queue):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    queue.put(F.conv2d(mg.tensor(x), mg.tensor(w), padding=1).numpy())


@needs_onednn
@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_child_forked_after_threaded_calls_convolves_on_one_thread():
    previous = mg.get_num_threads()
    try:
        mg.set_num_threads(2)  # GNU OpenMP's pool is started in this process
        _convolve_in_child(multiprocessing.Queue())
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_convolve_in_child, args=(queue,))
        child.start()
        from_child = queue.get(timeout=60)
        child.join(60)
    finally:
        mg.set_num_threads(previous)
    assert child.exitcode == 0
    mine = multiprocessing.Queue()
    _convolve_in_child(mine)
    np.testing.assert_allclose(from_child, mine.get(timeout=10), rtol=1e-6, atol=1e-6)


def _in_subprocess(code, **environ):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **environ})


def test_mpigrad_onednn_0_turns_it_off_and_a_bad_value_names_the_variable():
    code = ("import mpigrad as mg; from mpigrad.kernels import onednn; "
            "print(mg.backends.mkldnn.is_available(), onednn.unavailable_reason())")
    off = _in_subprocess(code, MPIGRAD_ONEDNN="0")
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["False", "MPIGRAD_ONEDNN=0"]
    bad = _in_subprocess(code, MPIGRAD_ONEDNN="yes")
    assert bad.returncode != 0
    assert "MPIGRAD_ONEDNN='yes'" in bad.stderr


@needs_onednn
def test_import_leaves_onednn_unloaded_until_a_float32_convolution():
    code = ("import numpy as np, mpigrad as mg\n"
            "def loaded(): return 'libdnnl' in open('/proc/self/maps').read()\n"
            "print(loaded())\n"
            "x, w = mg.ones(1, 8, 5, 5), mg.ones(4, 8, 3, 3)\n"
            "mg.nn.functional.conv2d(x.double(), w.double())\n"
            "print(loaded())\n"
            "mg.nn.functional.conv2d(x, w)\n"
            "print(loaded())\n")
    run = _in_subprocess(code)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "False", "True"]


def test_without_the_wheel_the_numpy_kernels_convolve(monkeypatch):
    monkeypatch.setattr(onednn, "library_path", lambda: None)
    monkeypatch.setattr(onednn._State, "loaded", None)
    monkeypatch.setattr(onednn._State, "reason", None)
    assert not mg.backends.mkldnn.is_available()
    assert "onednn-cpu-gomp" in onednn.unavailable_reason()
    rng = np.random.default_rng(8)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((2, 8, 7, 7), (8, 8, 3, 3)))
    np.testing.assert_allclose(F.conv2d(mg.tensor(x), mg.tensor(w)).numpy(),
                               TF.conv2d(torch.tensor(x), torch.tensor(w)).numpy(),
                               rtol=1.3e-6, atol=1e-5)
