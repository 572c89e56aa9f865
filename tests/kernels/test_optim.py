"""The optimizers' one-pass updates (kernels/compiled/optim.py) in float32, float16 and on
strided parameters, against torch (every optimizer in float32, run to run identical); float64
is covered by tests/optim against torch."""
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
    "adamax": (optim.Adamax, torch.optim.Adamax, dict(lr=0.01, weight_decay=0.1, maximize=True)),
    "nadam": (optim.NAdam, torch.optim.NAdam, dict(lr=0.01, weight_decay=0.1,
                                                   decoupled_weight_decay=True)),
    "radam": (optim.RAdam, torch.optim.RAdam, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)),
    "adagrad": (optim.Adagrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01,
                                                         weight_decay=0.1)),
    "adadelta": (optim.Adadelta, torch.optim.Adadelta, dict(lr=0.5, weight_decay=0.1,
                                                            maximize=True)),
    "rmsprop_centered_momentum": (optim.RMSprop, torch.optim.RMSprop,
                                  dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
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


def _problem(dtype, steps=20):
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


@pytest.mark.parametrize("case", ["sgd", "adamw", "radam", "rmsprop_centered_momentum"])
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
