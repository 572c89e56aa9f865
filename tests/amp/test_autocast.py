"""bfloat16/float16 tensors and autocast against torch: the numerics of a 16-bit op, torch's
promotion rules, which ops autocast runs in which dtype, and the API (nesting, enabled=False,
decorator, queries)."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import mpigrad as mg
import mpigrad.nn.functional as F

torch = pytest.importorskip("torch")

DTYPES = ["bfloat16", "float16"]


def _round(array, dtype):
    return array.astype(np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.float16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_16_bit_matmul_is_the_float32_product_rounded_once(dtype):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((7, 33)), rng.standard_normal((33, 5))
    a16, b16 = _round(a, dtype), _round(b, dtype)
    expected = _round(a16.astype(np.float32) @ b16.astype(np.float32), dtype)
    got = mg.tensor(a).to(getattr(mg, dtype)).requires_grad_() @ mg.tensor(b).to(getattr(mg, dtype))
    assert got.dtype == getattr(mg, dtype) and got.grad_fn.name() == "MmBackward0"
    got = got.detach()
    np.testing.assert_array_equal(got.numpy().astype(np.float32), expected.astype(np.float32))
    # torch's CPU kernels block the inner dimension, which may move a result by a rounding.
    theirs = torch.tensor(a).to(getattr(torch, dtype)) @ torch.tensor(b).to(getattr(torch, dtype))
    torch.testing.assert_close(torch.from_numpy(got.numpy().astype(np.float32)).to(theirs.dtype),
                               theirs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_16_bit_ops_and_their_gradients_equal_torch(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    results, names = [], []
    for lib in (mg, torch):
        t = lib.tensor(x).to(getattr(lib, dtype)).requires_grad_()
        y = (t.exp() * 3 + t.sin()).sum(-1).mean() + lib.nn.functional.gelu(t).sum()
        y.backward()
        names.append(y.grad_fn.name())
        results.append((str(y.dtype).removeprefix("torch."), float(y), t.grad.float().numpy()
                        if lib is torch else t.grad.numpy().astype(np.float32)))
    (d1, v1, g1), (d2, v2, g2) = results
    assert d1 == d2 == dtype and names[0] == names[1]
    # Each op and each gradient rule rounds once, as torch's kernels do; a few of torch's
    # kernels round at other places, so values agree to torch's tolerance for the dtype.
    tol = {"bfloat16": dict(rtol=1.6e-2, atol=1e-5), "float16": dict(rtol=1e-3, atol=1e-5)}[dtype]
    np.testing.assert_allclose(v1, v2, **tol)
    np.testing.assert_allclose(g1, g2, **tol)


PROMOTIONS = [("bfloat16", "float16"), ("bfloat16", "float32"), ("float16", "float64"),
              ("bfloat16", "int64"), ("int32", "float16"), ("bfloat16", "bfloat16")]


@pytest.mark.parametrize("left,right", PROMOTIONS)
def test_promotion_follows_torch(left, right):
    def pair(lib, zero_dim_right=False):
        a = lib.ones(3, dtype=getattr(lib, left))
        b = lib.ones(() if zero_dim_right else 3, dtype=getattr(lib, right))
        return a, b
    for zero_dim in (False, True):
        a, b = pair(mg, zero_dim)
        ta, tb = pair(torch, zero_dim)
        assert str((a + b).dtype) == str((ta + tb).dtype).removeprefix("torch."), (zero_dim,)
    if "int" in left:
        return
    assert str((mg.ones(2, dtype=getattr(mg, left)) * 2.5).dtype) == str(
        (torch.ones(2, dtype=getattr(torch, left)) * 2.5).dtype).removeprefix("torch.")


def test_bfloat16_is_a_floating_dtype_with_torch_names():
    t = mg.zeros(2, dtype=mg.bfloat16, requires_grad=True)
    assert t.is_floating_point() and mg.bfloat16 != mg.float16
    assert t.element_size() == 2
    with pytest.raises(RuntimeError, match="BFloat16"):
        F.linear(mg.ones(2, 3, dtype=mg.bfloat16), mg.ones(4, 3))


def _policy_cases(lib):
    f = lib.nn.functional
    rng = np.random.default_rng(2)
    x = lib.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    w = lib.tensor(rng.standard_normal((6, 8)).astype(np.float32))
    v = lib.tensor(rng.standard_normal((8, 8)).astype(np.float32))
    y = lib.tensor(rng.integers(0, 6, 4))
    img = lib.tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    k = lib.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    return {
        "matmul": lambda: x @ w.T, "linear": lambda: f.linear(x, w),
        "conv2d": lambda: f.conv2d(img, k), "conv1d": lambda: f.conv1d(x[None], v[:2, :4, None]),
        "bmm": lambda: lib.bmm(x[None], w.T[None]), "einsum": lambda: lib.einsum("ij,kj->ik", x, w),
        "sdpa": lambda: f.scaled_dot_product_attention(x[None], x[None], x[None]),
        "softmax": lambda: f.softmax(f.linear(x, w), -1), "relu": lambda: f.relu(x),
        "layer_norm": lambda: f.layer_norm(f.linear(x, w), (6,)),
        "cross_entropy": lambda: f.cross_entropy(f.linear(x, w), y),
        "mse_loss": lambda: f.mse_loss(f.linear(x, w), f.linear(x, w) * 2),
        "nll_loss": lambda: f.nll_loss(f.log_softmax(f.linear(x, w), -1), y),
        "cat": lambda: lib.cat([x, f.linear(x, v)]),
        "stack": lambda: lib.stack([f.linear(x, v), f.linear(x, v)]),
        "add": lambda: x + f.linear(x, v),
        "float64": lambda: x.double() @ w.double().T,
    }


@pytest.mark.parametrize("dtype", DTYPES)
def test_autocast_runs_each_op_in_torchs_dtype(dtype):
    ours, theirs = {}, {}
    with mg.autocast("cpu", dtype=getattr(mg, dtype)):
        for name, run in _policy_cases(mg).items():
            ours[name] = str(run().dtype)
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        for name, run in _policy_cases(torch).items():
            theirs[name] = str(run().dtype).removeprefix("torch.")
    assert ours == theirs


def test_autocast_nesting_enabled_false_decorator_and_queries():
    x, w = mg.ones(2, 3), mg.ones(4, 3)
    assert not mg.is_autocast_enabled("cpu") and not mg.is_autocast_enabled()
    with mg.autocast("cpu", dtype=mg.bfloat16):
        assert mg.is_autocast_enabled("cpu") and not mg.is_autocast_enabled()
        assert mg.get_autocast_dtype("cpu") == mg.bfloat16
        with mg.amp.autocast("cpu", dtype=mg.float16):
            assert F.linear(x, w).dtype == mg.float16
            with mg.autocast("cpu", enabled=False):
                assert not mg.is_autocast_enabled("cpu")
                assert F.linear(x, w).dtype == mg.float32
            assert mg.get_autocast_dtype("cpu") == mg.float16
        assert F.linear(x, w).dtype == mg.bfloat16
    assert F.linear(x, w).dtype == mg.float32
    assert mg.get_autocast_dtype("cpu") == torch_dtype_name_to_mg(torch.get_autocast_dtype("cpu"))

    @mg.cpu.amp.autocast()
    def forward(a, b):
        return F.linear(a, b)
    assert forward(x, w).dtype == mg.bfloat16
    assert F.linear(x, w).dtype == mg.float32
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'mps'"):
        mg.autocast("mps")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mg.autocast("cpu", dtype=mg.float32):
            assert not mg.is_autocast_enabled("cpu")
    assert "CPU Autocast only supports" in str(caught[0].message)


def torch_dtype_name_to_mg(dtype):
    return getattr(mg, str(dtype).removeprefix("torch."))


def test_backward_inside_the_block_runs_in_the_forward_dtypes():
    """As torch: the gradient of an fp32 weight used by an autocast linear is fp32, whether
    backward runs inside the block or after it, and the same in both cases."""
    rng = np.random.default_rng(3)
    x = mg.tensor(rng.standard_normal((3, 5)).astype(np.float32))
    weight = rng.standard_normal((4, 5)).astype(np.float32)
    grads = []
    for inside in (True, False):
        w = mg.tensor(weight, requires_grad=True)
        with mg.autocast("cpu"):
            loss = F.linear(x, w).float().pow(2).sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        assert w.grad.dtype == mg.float32
        grads.append(w.grad.numpy())
    np.testing.assert_array_equal(*grads)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_16_bit_module_computes_as_torchs(dtype):
    torch.manual_seed(0)
    theirs = torch.nn.Linear(24, 6)
    ours = mg.nn.Linear(24, 6)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    convert = "bfloat16" if dtype == "bfloat16" else "half"
    theirs, ours = getattr(theirs, convert)(), getattr(ours, convert)()
    x = np.random.default_rng(4).standard_normal((3, 24)).astype(np.float32)
    got = ours(getattr(mg.tensor(x), convert)())
    expected = theirs(getattr(torch.tensor(x), convert)())
    assert ours.weight.dtype == got.dtype == getattr(mg, dtype)
    torch.testing.assert_close(torch.from_numpy(got.detach().numpy().astype(np.float32))
                               .to(expected.dtype), expected.detach())


def test_a_16_bit_array_handed_in_first_starts_the_16_bit_arithmetic():
    """In a fresh interpreter, from_numpy of a float16 array is the first 16-bit use: its
    softmax is still computed in float32 and rounded once (numpy's float16 arithmetic rounds
    the exponentials, their sum and the quotient each)."""
    import subprocess
    import sys
    code = (
        "import numpy as np, mpigrad as mg\n"
        "a = np.random.default_rng(0).standard_normal((6, 200)).astype(np.float16)\n"
        "got = mg.softmax(mg.from_numpy(a), -1).numpy()\n"
        "want = mg.softmax(mg.from_numpy(a.astype(np.float32)), -1).numpy().astype(np.float16)\n"
        "assert got.dtype == np.float16 and (got == want).all(), abs(got - want).max()\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_bfloat16_default_dtype_as_torch():
    previous = mg.get_default_dtype()
    try:
        mg.set_default_dtype(mg.bfloat16)
        assert mg.tensor([1.5]).dtype == mg.ones(2).dtype == mg.bfloat16
    finally:
        mg.set_default_dtype(previous)


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_a_weight_used_twice_is_cast_once_as_in_torch(cache_enabled):
    """Inside autocast torch casts a float32 weight once and every use shares the cast, so the
    uses' gradients add up in bf16 before reaching the weight; without the cache they add in
    float32. The weight's gradient equals torch's either way, bit for bit."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w0 = rng.standard_normal((8, 8)).astype(np.float32)
    grads = []
    for lib in (mg, torch):
        w = lib.tensor(w0).requires_grad_()
        with lib.autocast("cpu", dtype=lib.bfloat16, cache_enabled=cache_enabled):
            h = lib.nn.functional.linear(lib.tensor(x), w)
            out = lib.nn.functional.linear(h, w).float().sum()
        out.backward()
        grads.append(w.grad.numpy())
    np.testing.assert_array_equal(*grads)


def test_cuda_autocast_and_scaler_warn_and_do_nothing_as_torch_without_cuda():
    """`torch.cuda.amp` and `autocast("cuda")` on a machine without CUDA: warnings, float32."""
    for lib in (mg, torch):
        x = lib.ones(2, 3)
        with pytest.warns(UserWarning, match="CUDA is not available"):
            with lib.autocast("cuda"):
                assert lib.nn.functional.linear(x, lib.ones(4, 3)).dtype == lib.float32
        with pytest.warns(FutureWarning, match="torch.cuda.amp.autocast"):
            with lib.cuda.amp.autocast():
                assert not lib.is_autocast_enabled("cpu")
        with pytest.warns(FutureWarning, match="torch.cuda.amp.GradScaler"):
            assert not lib.cuda.amp.GradScaler().is_enabled()
        assert lib.get_autocast_dtype("cuda") == lib.float16
