"""Mixed-precision training steps against torch on the CPU: autocast (bf16 and fp16) with a
GradScaler, for a small MLP and a small transformer block. Losses, parameters and the scale
after every step equal torch's to torch's own tolerance for the autocast dtype, and a batch
holding an inf makes both skip the same step and back the scale off."""
import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")

# torch.testing.assert_close's defaults for the low-precision dtype the step computes in.
TOL = {"bfloat16": dict(rtol=1.6e-2, atol=1e-5), "float16": dict(rtol=1e-3, atol=1e-5)}
STEPS = 5
INF_STEP = 2


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(12, 24), lib.nn.ReLU(), lib.nn.Linear(24, 5))


def _block(lib):
    # gelu, not relu: a pre-activation near zero whose sign one rounding flips switches a
    # ReLU unit on or off, a jump no tolerance describes.
    class Block(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = lib.nn.TransformerEncoderLayer(16, 2, dim_feedforward=24, dropout=0.0,
                                                        activation="gelu",
                                                        batch_first=True)
            self.head = lib.nn.Linear(16, 5)

        def forward(self, x):
            return self.head(self.layer(x).mean(1))
    return Block()


def _batches(shape, rng):
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(STEPS)]
    xs[INF_STEP].flat[3] = np.inf
    ys = [rng.integers(0, 5, shape[0]) for _ in range(STEPS)]
    return xs, ys


def _train(lib, model, dtype, xs, ys):
    # SGD rather than Adam: Adam's first steps move every weight by about lr whatever the
    # size of its gradient, so a gradient near zero whose sign a bf16 rounding flips would
    # move a weight the other way (both libraries round correctly, at different places).
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    record = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        with lib.autocast("cpu", dtype=dtype):
            out = model(lib.tensor(x))
            loss = lib.nn.functional.cross_entropy(out, lib.tensor(y))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        record.append((out.dtype, loss.dtype, loss.item(), scaler.get_scale(),
                       {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}))
    return record


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("build,shape,elementwise", [(_mlp, (8, 12), True),
                                                     (_block, (4, 3, 16), False)],
                         ids=["mlp", "transformer_block"])
def test_autocast_and_grad_scaler_steps_equal_torch(build, shape, elementwise, dtype):
    """The MLP's parameters equal torch's element by element. In the block, torch's fused
    attention and mixed-dtype layer-norm backward kernels sum in their own order, and a few of
    its float16 kernels (log_softmax) round at other places, so a gradient may differ by a
    rounding; the block's parameters are held to two roundings (2 rtol) of how far training
    moved each tensor."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    theirs = build(torch)
    ours = build(mg)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    xs, ys = _batches(shape, rng)
    initial = {k: v.numpy().copy() for k, v in theirs.state_dict().items()}
    expected = _train(torch, theirs, getattr(torch, dtype), xs, ys)
    got = _train(mg, ours, getattr(mg, dtype), xs, ys)
    tol = TOL[dtype]
    for step, (mine, reference) in enumerate(zip(got, expected)):
        out_dtype, loss_dtype, loss, scale, params = mine
        t_out_dtype, t_loss_dtype, t_loss, t_scale, t_params = reference
        assert str(out_dtype) == str(t_out_dtype).removeprefix("torch.") == dtype
        assert str(loss_dtype) == "float32" and t_loss_dtype == torch.float32
        assert scale == t_scale, step
        if step == INF_STEP:
            assert np.isnan(loss) and np.isnan(t_loss)
        else:
            np.testing.assert_allclose(loss, t_loss, **tol, err_msg=f"step {step}")
        for name, value in params.items():
            assert value.dtype == np.float32
            if elementwise:
                np.testing.assert_allclose(value, t_params[name], **tol,
                                           err_msg=f"{name} step {step}")
            else:
                change = np.abs(t_params[name] - initial[name]).max()
                assert np.abs(value - t_params[name]).max() <= 2 * tol["rtol"] * change, (
                    name, step)
    # The inf step was skipped (the scale backed off, then grew back every 2 clean steps).
    scales = [r[3] for r in got]
    assert scales[INF_STEP] == scales[INF_STEP - 1] / 2
    for name in got[INF_STEP][4]:
        np.testing.assert_array_equal(got[INF_STEP][4][name], got[INF_STEP - 1][4][name])
