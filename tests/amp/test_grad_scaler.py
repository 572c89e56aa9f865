"""GradScaler against torch's: the same scale, growth tracker and state dict through a run of
clean and overflowing steps, unscale_ in place, and torch's errors and disabled behaviour."""
import warnings

import numpy as np
import pytest

import mpigrad as mg

torch = pytest.importorskip("torch")


def _run(lib, grads, scaler, values=None):
    """One parameter, SGD; each step's gradient is given (possibly inf or nan)."""
    p = lib.nn.Parameter(lib.tensor(np.ones(3, dtype=np.float32)))
    opt = lib.optim.SGD([p], lr=0.5)
    seen = []
    for g in grads:
        opt.zero_grad()
        loss = (p * lib.tensor(np.asarray(g, dtype=np.float32))).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        unscaled = p.grad.detach().numpy().copy()
        scaler.step(opt)
        scaler.update()
        seen.append((scaler.get_scale(), scaler.state_dict(), unscaled,
                     p.detach().numpy().copy()))
    return seen


GRADS = [[1, 2, 3], [1, np.inf, 0], [0.5, 0.5, 0.5], [1, 1, 1], [np.nan, 1, 1],
         [3, 2, 1], [1e-3, 1, 2], [2, 2, 2]]


def test_scale_steps_and_state_dict_equal_torch():
    kwargs = dict(init_scale=2.0 ** 7, growth_factor=3.0, backoff_factor=0.25, growth_interval=2)
    ours = _run(mg, GRADS, mg.amp.GradScaler("cpu", **kwargs))
    theirs = _run(torch, GRADS, torch.amp.GradScaler("cpu", **kwargs))
    for step, ((scale, state, grad, param), (t_scale, t_state, t_grad, t_param)) in enumerate(
            zip(ours, theirs)):
        assert scale == t_scale, step
        assert state == t_state, step
        np.testing.assert_array_equal(grad, t_grad)
        np.testing.assert_array_equal(param, t_param)
    # The steps with inf and nan were skipped: the parameter did not move.
    np.testing.assert_array_equal(ours[1][3], ours[0][3])
    np.testing.assert_array_equal(ours[4][3], ours[3][3])


def test_load_state_dict_carries_the_scale_and_tracker():
    first = mg.amp.GradScaler("cpu", init_scale=64.0, growth_interval=3)
    _run(mg, GRADS[:4], first)
    second = mg.cpu.amp.GradScaler()
    second.load_state_dict(first.state_dict())
    assert second.state_dict() == first.state_dict()
    assert _run(mg, GRADS[4:], second)[-1][1] == _run(mg, GRADS[4:], first)[-1][1]


def test_errors_and_disabled_scaler_as_torch():
    for lib in (mg, torch):
        scaler = lib.amp.GradScaler("cpu")
        p = lib.nn.Parameter(lib.ones(2))
        opt = lib.optim.SGD([p], lr=0.1)
        scaler.scale(p.sum()).backward()
        scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="already been called"):
            scaler.unscale_(opt)
        scaler.step(opt)
        with pytest.raises(RuntimeError, match="after step"):
            scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="Closure"):
            scaler.step(opt, closure=lambda: None)
        scaler.update()
        with pytest.raises(RuntimeError, match="empty"):
            scaler.load_state_dict({})

        off = lib.amp.GradScaler("cpu", enabled=False)
        loss = p.sum()
        assert off.scale(loss) is loss and off.get_scale() == 1.0 and not off.is_enabled()
        assert off.state_dict() == {}
        with pytest.raises(AssertionError, match="growth factor"):
            lib.amp.GradScaler("cpu", growth_factor=1.0)
        # The default device is CUDA: absent here, so a warning and no scaling.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not lib.amp.GradScaler().is_enabled()
        assert "CUDA is not available" in str(caught[0].message)
