"""The optimizers against torch.optim on the same parameters and gradients."""

import itertools
import re

import numpy as np
import pytest

import mpigrad as mg
from mpigrad import Tensor, optim

torch = pytest.importorskip("torch")

SHAPES = [(4, 3), (3,), (2, 2, 2)]
STEPS = 20


def make_problem(seed, dtype=np.float64):
    """Initial parameters and, per step, one gradient per parameter; parameter
    2 has no gradient on step 3, which both libraries must skip."""
    rng = np.random.default_rng(seed)
    initial = [rng.standard_normal(shape).astype(dtype) for shape in SHAPES]
    grads = [[rng.standard_normal(shape).astype(dtype) for shape in SHAPES]
             for _ in range(STEPS)]
    grads[3][2] = None
    return initial, grads


def run_mpigrad(make_optimizer, initial, grads):
    params = [Tensor(p.copy(), requires_grad=True) for p in initial]
    optimizer = make_optimizer(params)
    for step_grads in grads:
        for param, grad in zip(params, step_grads):
            param.grad = None if grad is None else Tensor(grad.copy())
        optimizer.step()
    return [p.data for p in params], optimizer


def run_torch(make_optimizer, initial, grads):
    params = [torch.tensor(p, requires_grad=True) for p in initial]
    optimizer = make_optimizer(params)
    for step_grads in grads:
        for param, grad in zip(params, step_grads):
            param.grad = None if grad is None else torch.tensor(grad)
        optimizer.step()
    return [p.detach().numpy() for p in params]


def assert_matches_torch(ours, theirs, kwargs, seed=0, atol=1e-12):
    initial, grads = make_problem(seed)
    got, _ = run_mpigrad(lambda ps: ours(ps, **kwargs), initial, grads)
    expected = run_torch(lambda ps: theirs(ps, **kwargs), initial, grads)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=atol)
    # The comparison means something only if the parameters moved.
    assert not np.allclose(got[0], initial[0])


SGD_GRID = [
    dict(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
         weight_decay=weight_decay, maximize=maximize)
    for lr, momentum, dampening, nesterov, weight_decay, maximize in itertools.product(
        [0.1], [0.0, 0.9], [0.0, 0.3], [False, True], [0.0, 0.01], [False, True])
    if not (nesterov and (momentum == 0 or dampening != 0))
]


@pytest.mark.parametrize("kwargs", SGD_GRID, ids=str)
def test_sgd_matches_torch(kwargs):
    assert_matches_torch(optim.SGD, torch.optim.SGD, kwargs)


ADAM_GRID = [
    dict(lr=lr, betas=betas, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize)
    for lr, betas, weight_decay, amsgrad, maximize in itertools.product(
        [0.05], [(0.9, 0.999), (0.3, 0.8)], [0.0, 0.1], [False, True], [False, True])
]


@pytest.mark.parametrize("kwargs", ADAM_GRID, ids=str)
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_matches_torch(name, kwargs):
    assert_matches_torch(getattr(optim, name), getattr(torch.optim, name), kwargs)


@pytest.mark.parametrize("name, kwargs", [("SGD", dict(lr=0.1, momentum=0.9, dampening=0.2)),
                                          ("Adam", dict(amsgrad=True, weight_decay=0.1)),
                                          ("AdamW", dict(maximize=True))])
def test_non_contiguous_parameters_match_torch(name, kwargs):
    initial, grads = make_problem(seed=4)
    # A transposed parameter: the kernels update it through a contiguous copy.
    initial[0] = np.asfortranarray(initial[0])
    got, _ = run_mpigrad(lambda ps: getattr(optim, name)(ps, **kwargs), initial, grads)
    expected = run_torch(lambda ps: getattr(torch.optim, name)(ps, **kwargs), initial, grads)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)


ALL = ["SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop",
       "Rprop", "ASGD"]
FLAGS = [dict(fused=True), dict(fused=False), dict(foreach=True), dict(foreach=False),
         dict(foreach=True, fused=True), dict(fused=True, differentiable=True),
         dict(capturable=True), dict(capturable=True, foreach=True),
         dict(fused=True, capturable=True), dict(fused=True, amsgrad=True)]


def _outcome(lib, name, flags):
    """Where torch's choice of kernels `flags` fails (construction or step) and how."""
    param = lib.ones(3, dtype=lib.float64, requires_grad=True)
    try:
        optimizer = getattr(lib.optim, name)([param], lr=0.1, **flags)
    except (TypeError, ValueError, RuntimeError, AssertionError) as error:
        return "construction", type(error)
    param.grad = lib.ones(3, dtype=lib.float64)
    try:
        optimizer.step()
    except (TypeError, ValueError, RuntimeError, AssertionError) as error:
        return "step", type(error)
    return "ok", None


@pytest.mark.parametrize("name", ALL)
def test_torchs_kernel_choices_are_accepted_or_refused_as_torch_does(name):
    """fused= exists for SGD, Adam, AdamW and Adagrad (torch 2.13 runs those fused on CPU),
    never with foreach=True or differentiable=True; capturable=True fails at the step on CPU
    unless fused. Every accepted choice runs the same one-pass kernel."""
    for flags in FLAGS:
        assert _outcome(mg, name, flags) == _outcome(torch, name, flags), flags


@pytest.mark.parametrize("name", ALL)
def test_differentiable_steps_are_refused_and_bad_flags_are_type_errors(name):
    params = [Tensor(np.ones(3), requires_grad=True)]
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        getattr(optim, name)(params, lr=0.1, differentiable=True)
    with pytest.raises(TypeError, match="foreach must be None, True or False"):
        getattr(optim, name)(params, lr=0.1, foreach="yes")


@pytest.mark.parametrize("name", ALL)
def test_a_tensor_lr_follows_the_scheduler_in_place_and_matches_torch(name):
    kwargs = dict(momentum=0.9) if name == "SGD" else {}

    initial, grads = make_problem(seed=7)

    def train(lib):
        params = [lib.tensor(p.copy(), requires_grad=True) for p in initial]
        lr = lib.tensor(0.05, dtype=lib.float64)
        optimizer = getattr(lib.optim, name)(params, lr=lr, **kwargs)
        scheduler = lib.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=7)
        for step_grads in grads:
            for param, grad in zip(params, step_grads):
                param.grad = None if grad is None else lib.tensor(grad)
            optimizer.step()
            scheduler.step()
        assert optimizer.param_groups[0]["lr"] is lr
        return [p.detach().numpy() for p in params], float(lr)

    (got, our_lr), (expected, their_lr) = train(mg), train(torch)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)
    # The user's tensor was filled in place with the schedule's lr.
    assert our_lr == pytest.approx(their_lr, abs=1e-15) and our_lr != 0.05
    with pytest.raises(ValueError, match="lr as a Tensor is not supported"):
        (optim.AdamW if name == "AdamW" else optim.Adam)(
            [Tensor(np.ones(2), requires_grad=True)], lr=mg.tensor(0.1), foreach=True)


@pytest.mark.parametrize("name, kwargs", [("SGD", dict(momentum=0.9, nesterov=True)),
                                          ("Adam", dict(amsgrad=True)),
                                          ("AdamW", dict(weight_decay=0.2))])
def test_param_groups_with_their_own_hyperparameters_match_torch(name, kwargs):
    def groups(params):
        return [{"params": params[:2]}, {"params": params[2:], "lr": 0.01}]

    initial, grads = make_problem(seed=1)
    got, _ = run_mpigrad(lambda ps: getattr(optim, name)(groups(ps), lr=0.1, **kwargs),
                         initial, grads)
    expected = run_torch(lambda ps: getattr(torch.optim, name)(groups(ps), lr=0.1, **kwargs),
                         initial, grads)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name, kwargs", [("SGD", dict(lr=0.1, momentum=0.9, weight_decay=1e-3)),
                                          ("Adam", dict(lr=0.01)),
                                          ("AdamW", dict(lr=0.01, amsgrad=True))])
def test_float32_parameters_and_state_stay_float32_and_match_torch(name, kwargs):
    initial, grads = make_problem(seed=2, dtype=np.float32)
    got, optimizer = run_mpigrad(lambda ps: getattr(optim, name)(ps, **kwargs), initial, grads)
    expected = run_torch(lambda ps: getattr(torch.optim, name)(ps, **kwargs), initial, grads)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    buffers = [v for state in optimizer.state.values() for v in state.values()
               if isinstance(v, Tensor)]
    assert buffers and all(b.dtype == np.float32 for b in buffers)


@pytest.mark.parametrize("name, kwargs", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                          ("Adam", dict(lr=0.05, weight_decay=1e-2))])
def test_training_through_autograd_with_a_closure_matches_torch(name, kwargs):
    import mpigrad as mg

    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((8, 4)), rng.standard_normal((8, 2))
    w0, b0 = rng.standard_normal((4, 2)), rng.standard_normal(2)

    def train(lib, optimizers):
        w = lib.tensor(w0.copy(), requires_grad=True)
        b = lib.tensor(b0.copy(), requires_grad=True)
        inputs, targets = lib.tensor(x), lib.tensor(y)
        optimizer = getattr(optimizers, name)([w, b], **kwargs)

        def closure():
            optimizer.zero_grad()
            loss = ((lib.tanh(inputs @ w + b) - targets) ** 2).mean()
            loss.backward()
            return loss

        losses = [optimizer.step(closure).item() for _ in range(6)]
        return losses, w.detach().numpy(), b.detach().numpy()

    ours, theirs = train(mg, optim), train(torch, torch.optim)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
    assert ours[0][-1] < ours[0][0]
    for got, expected in zip(ours[1:], theirs[1:]):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


ADADELTA_GRID = [dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
                 for lr, rho, eps, weight_decay, maximize in itertools.product(
                     [1.0, 0.3], [0.9, 0.5], [1e-6, 1e-3], [0.0, 0.1], [False, True])]
ADAGRAD_GRID = [dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                     initial_accumulator_value=initial, eps=eps, maximize=maximize)
                for lr, lr_decay, weight_decay, initial, eps, maximize in itertools.product(
                    [0.1], [0.0, 0.05], [0.0, 0.1], [0.0, 0.5], [1e-10, 1e-3], [False, True])]
RMSPROP_GRID = [dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                     centered=centered, maximize=maximize)
                for lr, alpha, eps, weight_decay, momentum, centered, maximize in
                itertools.product([0.01], [0.99, 0.6], [1e-8], [0.0, 0.1], [0.0, 0.9],
                                  [False, True], [False, True])]


@pytest.mark.parametrize("name, kwargs",
                         [("Adadelta", k) for k in ADADELTA_GRID]
                         + [("Adagrad", k) for k in ADAGRAD_GRID]
                         + [("RMSprop", k) for k in RMSPROP_GRID], ids=str)
def test_adadelta_adagrad_rmsprop_match_torch(name, kwargs):
    assert_matches_torch(getattr(optim, name), getattr(torch.optim, name), kwargs)


RPROP_GRID = [dict(lr=lr, etas=etas, step_sizes=step_sizes, maximize=maximize)
              for lr, etas, step_sizes, maximize in itertools.product(
                  [0.01, 0.2], [(0.5, 1.2), (0.3, 1.5)], [(1e-6, 50), (1e-3, 0.05)],
                  [False, True])]
ASGD_GRID = [dict(lr=0.05, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                  maximize=maximize)
             for lambd, alpha, t0, weight_decay, maximize in itertools.product(
                 [1e-4, 0.3], [0.75, 0.5], [1e6, 5], [0.0, 0.1], [False, True])]


@pytest.mark.parametrize("name, kwargs", [("Rprop", k) for k in RPROP_GRID]
                         + [("ASGD", k) for k in ASGD_GRID], ids=str)
def test_rprop_asgd_match_torch(name, kwargs):
    """Rprop's gradients here flip sign often, so its grow, shrink and skip paths all run;
    ASGD with t0=5 averages from step 6 on (mu < 1)."""
    assert_matches_torch(getattr(optim, name), getattr(torch.optim, name), kwargs)


@pytest.mark.parametrize("name, kwargs", [("Rprop", dict(lr=0.01)), ("ASGD", dict(t0=5))])
def test_rprop_asgd_float32_and_complex_match_torch(name, kwargs):
    initial, grads = make_problem(seed=5, dtype=np.float32)
    got, _ = run_mpigrad(lambda ps: getattr(optim, name)(ps, **kwargs), initial, grads)
    expected = run_torch(lambda ps: getattr(torch.optim, name)(ps, **kwargs), initial, grads)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(6)
    start = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    steps = [[rng.standard_normal(4) + 1j * rng.standard_normal(4)] for _ in range(STEPS)]
    got, _ = run_mpigrad(lambda ps: getattr(optim, name)(ps, **kwargs), [start], steps)
    expected = run_torch(lambda ps: getattr(torch.optim, name)(ps, **kwargs), [start], steps)
    np.testing.assert_allclose(got[0], expected[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name, kwargs, message", [
    ("Rprop", dict(etas=(1.1, 1.2)), "Invalid eta values: 1.1, 1.2"),
    ("Rprop", dict(etas=(0.5, 0.9)), "Invalid eta values: 0.5, 0.9"),
    ("Rprop", dict(lr=-1), "Invalid learning rate: -1"),
    ("ASGD", dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    ("ASGD", dict(lr=-1), "Invalid learning rate: -1"),
])
def test_rprop_asgd_bad_hyperparameters_are_torchs_errors(name, kwargs, message):
    for lib in (torch, mg):
        with pytest.raises(ValueError, match=re.escape(message)):
            getattr(lib.optim, name)([lib.ones(2, requires_grad=True)], **kwargs)


@pytest.mark.parametrize("name, kwargs", [("Adadelta", dict(weight_decay=0.1)),
                                          ("Adagrad", dict(lr_decay=0.1,
                                                           initial_accumulator_value=0.2)),
                                          ("RMSprop", dict(momentum=0.5, centered=True)),
                                          ("Rprop", dict(etas=(0.3, 1.5))),
                                          ("ASGD", dict(t0=5, weight_decay=0.1))])
def test_state_dicts_hold_torchs_keys_and_values(name, kwargs):
    initial, grads = make_problem(seed=4)
    _, ours = run_mpigrad(lambda ps: getattr(optim, name)(ps, **kwargs), initial, grads)
    params = [torch.tensor(p, requires_grad=True) for p in initial]
    theirs = getattr(torch.optim, name)(params, **kwargs)
    for step_grads in grads:
        for param, grad in zip(params, step_grads):
            param.grad = None if grad is None else torch.tensor(grad)
        theirs.step()
    ours_sd, theirs_sd = ours.state_dict(), theirs.state_dict()
    assert ours_sd["param_groups"][0].keys() == theirs_sd["param_groups"][0].keys()
    for key, value in theirs_sd["param_groups"][0].items():
        assert ours_sd["param_groups"][0][key] == value, key
    assert ours_sd["state"].keys() == theirs_sd["state"].keys()
    for index, state in theirs_sd["state"].items():
        assert ours_sd["state"][index].keys() == state.keys()
        for key, value in state.items():
            np.testing.assert_allclose(np.asarray(ours_sd["state"][index][key]),
                                       value.numpy(), rtol=0, atol=1e-12)
    # And the state dict resumes training exactly.
    resumed = getattr(optim, name)([Tensor(p.copy(), requires_grad=True) for p in initial],
                                   **kwargs)
    resumed.load_state_dict(ours_sd)
    assert resumed.state_dict()["state"].keys() == ours_sd["state"].keys()


def test_adagrad_state_exists_before_the_first_step_as_in_torch():
    params = [Tensor(np.ones(3), requires_grad=True)]
    optimizer = optim.Adagrad(params, initial_accumulator_value=0.5)
    state = optimizer.state_dict()["state"][0]
    assert state["step"] == 0
    np.testing.assert_array_equal(np.asarray(state["sum"]), [0.5] * 3)


@pytest.mark.parametrize("name, kwargs, message", [
    ("Adadelta", dict(rho=1.5), "Invalid rho value: 1.5"),
    ("Adagrad", dict(lr_decay=-1), "Invalid lr_decay value: -1"),
    ("Adagrad", dict(initial_accumulator_value=-1), "Invalid initial_accumulator_value value"),
    ("RMSprop", dict(alpha=-0.1), "Invalid alpha value: -0.1"),
    ("RMSprop", dict(momentum=-1), "Invalid momentum value: -1"),
    ("NAdam", dict(momentum_decay=-1), "Invalid momentum_decay value: -1"),
    ("NAdam", dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0"),
    ("RAdam", dict(eps=-1), "Invalid epsilon value: -1"),
    ("Adamax", dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    ("Adamax", dict(lr=-1), "Invalid learning rate: -1"),
])
def test_bad_hyperparameters_are_torchs_errors(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(optim, name)([Tensor(np.ones(2), requires_grad=True)], **kwargs)
    with pytest.raises(ValueError, match=message):
        getattr(torch.optim, name)([torch.ones(2, requires_grad=True)], **kwargs)


VARIANT_GRID = (
    [("NAdam", dict(lr=lr, betas=betas, weight_decay=wd, momentum_decay=md,
                    decoupled_weight_decay=dwd, maximize=mx))
     for lr, betas, wd, md, dwd, mx in itertools.product(
         [0.05], [(0.9, 0.999), (0.5, 0.9)], [0.0, 0.1], [4e-3, 0.5], [False, True],
         [False, True])]
    + [("RAdam", dict(lr=lr, betas=betas, weight_decay=wd, decoupled_weight_decay=dwd,
                      maximize=mx))
       # The rectified step switches on at step 6 (rho_t > 5): both phases are compared.
       for lr, betas, wd, dwd, mx in itertools.product(
           [0.05], [(0.9, 0.999), (0.8, 0.9)], [0.0, 0.1], [False, True], [False, True])]
    + [("Adamax", dict(lr=lr, betas=betas, eps=eps, weight_decay=wd, maximize=mx))
       for lr, betas, eps, wd, mx in itertools.product(
           [0.05], [(0.9, 0.999), (0.5, 0.8)], [1e-8, 0.3], [0.0, 0.1], [False, True])])


@pytest.mark.parametrize("name, kwargs", VARIANT_GRID, ids=str)
def test_nadam_radam_adamax_match_torch(name, kwargs):
    assert_matches_torch(getattr(optim, name), getattr(torch.optim, name), kwargs)


@pytest.mark.parametrize("name", ["NAdam", "RAdam", "Adamax"])
def test_adam_variants_state_dicts_and_float32_match_torch(name):
    initial, grads = make_problem(seed=5, dtype=np.float32)
    got, ours = run_mpigrad(lambda ps: getattr(optim, name)(ps, lr=0.01), initial, grads)
    params = [torch.tensor(p, requires_grad=True) for p in initial]
    theirs = getattr(torch.optim, name)(params, lr=0.01)
    for step_grads in grads:
        for param, grad in zip(params, step_grads):
            param.grad = None if grad is None else torch.tensor(grad)
        theirs.step()
    for g, e in zip(got, params):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-5, atol=1e-6)
    ours_sd, theirs_sd = ours.state_dict(), theirs.state_dict()
    assert ours_sd["param_groups"][0].keys() == theirs_sd["param_groups"][0].keys()
    for index, state in theirs_sd["state"].items():
        assert ours_sd["state"][index].keys() == state.keys()
        for key, value in state.items():
            np.testing.assert_allclose(np.asarray(ours_sd["state"][index][key]), value.numpy(),
                                       rtol=1e-5, atol=1e-7)
    resumed = getattr(optim, name)([Tensor(p.copy(), requires_grad=True) for p in initial],
                                   lr=0.01)
    resumed.load_state_dict(ours_sd)
    assert resumed.state_dict()["state"][0]["step"] == ours_sd["state"][0]["step"]


@pytest.mark.parametrize("name", ["Adam", "AdamW", "NAdam", "RAdam"])
def test_no_weight_decay_for_biases_and_norms_as_gpt_recipes_group_them(name):
    """The usual transformer recipe: decay the matrices, not the biases and norm weights."""
    def groups(params):
        return [{"params": [params[0], params[2]], "weight_decay": 0.1},
                {"params": [params[1]], "weight_decay": 0.0}]

    initial, grads = make_problem(seed=6)
    kwargs = dict(lr=0.02, betas=(0.9, 0.95))
    got, _ = run_mpigrad(lambda ps: getattr(optim, name)(groups(ps), **kwargs), initial, grads)
    expected = run_torch(lambda ps: getattr(torch.optim, name)(groups(ps), **kwargs), initial,
                         grads)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, kwargs", [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1, maximize=True)),
    ("Adam", dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.05, maximize=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1))])
def test_fused_steps_match_torchs_fused_cpu_kernels(name, kwargs, dtype):
    """torch runs these four with fused=True on CPU in its own kernels; ours run the same
    one-pass kernel as always, and agree over 20 steps."""
    initial, grads = make_problem(seed=8, dtype=dtype)
    fused = dict(kwargs, fused=True)
    got, _ = run_mpigrad(lambda ps: getattr(optim, name)(ps, **fused), initial, grads)
    expected = run_torch(lambda ps: getattr(torch.optim, name)(ps, **fused), initial, grads)
    tolerance = dict(rtol=0, atol=1e-12) if dtype == np.float64 else dict(rtol=1.3e-6, atol=1e-5)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, **tolerance)
