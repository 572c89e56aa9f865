"""The optimizers' one-pass updates (kernels/compiled/optim.py) in float32, float16 and on
strided parameters, against torch; float64 is covered by tests/optim against torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402
from mpigrad import optim  # noqa: E402

CASES = {
    "sgd": (optim.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    "sgd_nesterov_maximize": (optim.SGD, torch.optim.SGD,
                              dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    "sgd_dampening": (optim.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.3)),
    "adam": (optim.Adam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
    "adam_amsgrad": (optim.Adam, torch.optim.Adam, dict(lr=0.01, amsgrad=True, maximize=True)),
    "adamw": (optim.AdamW, torch.optim.AdamW, dict(lr=0.01, betas=(0.3, 0.9))),
}


def _run(lib, make, kwargs, initial, grads, transpose=False):
    params = [lib.tensor(p.T.copy().T if transpose else p.copy(), requires_grad=True)
              for p in initial]
    optimizer = make(params, **kwargs)
    for step in grads:
        for param, g in zip(params, step):
            param.grad = lib.tensor(g)
        optimizer.step()
    return [p.detach().numpy().astype(np.float64) for p in params]


def _problem(dtype, steps=6):
    rng = np.random.default_rng(0)
    shapes = [(5, 7), (9,)]
    initial = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return initial, [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(steps)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_steps_match_torch(case):
    ours, theirs, kwargs = CASES[case]
    initial, grads = _problem(np.float32)
    got = _run(mg, ours, kwargs, initial, grads)
    expected = _run(torch, theirs, kwargs, initial, grads)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    again = _run(mg, ours, kwargs, initial, grads)
    for g, a in zip(got, again):
        np.testing.assert_array_equal(g, a)


@pytest.mark.parametrize("case", ["sgd", "adamw"])
def test_strided_and_half_parameters(case):
    ours, theirs, kwargs = CASES[case]
    initial, grads = _problem(np.float64)
    strided = _run(mg, ours, kwargs, initial, grads, transpose=True)
    for s, e in zip(strided, _run(torch, theirs, kwargs, initial, grads)):
        np.testing.assert_allclose(s, e, rtol=0, atol=1e-12)
    initial, grads = _problem(np.float16, steps=2)
    half = _run(mg, ours, kwargs, initial, grads)
    expected = _run(torch, theirs, kwargs, [p.astype(np.float32) for p in initial],
                    [[g.astype(np.float32) for g in s] for s in grads])
    for h, e in zip(half, expected):
        np.testing.assert_allclose(h, e, rtol=2e-3, atol=2e-3)
