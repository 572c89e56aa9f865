"""Learning-rate schedulers: lr sequences against torch's, state dicts, errors."""
import re

import numpy as np
import pytest

import mpigrad
from mpigrad import Tensor, optim
from mpigrad.optim import lr_scheduler

STEPS = 30


def two_groups(lib):
    """An SGD optimizer of `lib` (mpigrad or torch) with two groups at different lrs."""
    a = lib.tensor(np.zeros(2), requires_grad=True)
    b = lib.tensor(np.zeros(3), requires_grad=True)
    return lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.02}], lr=0.1, momentum=0.9)


def one_group():
    return optim.SGD([Tensor(np.zeros(1), requires_grad=True)], lr=1.0)


def warmup_then_cosine(lib_lr, optimizer):
    warmup = lib_lr.LinearLR(optimizer, start_factor=0.1, total_iters=5)
    cosine = lib_lr.CosineAnnealingLR(optimizer, T_max=STEPS - 5, eta_min=1e-4)
    return lib_lr.SequentialLR(optimizer, [warmup, cosine], milestones=[5])


SCHEDULES = {
    "step": lambda L, o: L.StepLR(o, step_size=4, gamma=0.5),
    "cosine": lambda L, o: L.CosineAnnealingLR(o, T_max=12, eta_min=1e-3),  # goes past T_max
    "lambda": lambda L, o: L.LambdaLR(o, lambda epoch: 0.9 ** epoch + epoch % 3),
    "lambda-per-group": lambda L, o: L.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e]),
    "linear-warmup": lambda L, o: L.LinearLR(o, start_factor=0.1, total_iters=7),
    "linear-decay": lambda L, o: L.LinearLR(o, start_factor=1.0, end_factor=0.25,
                                            total_iters=10),
    "warmup-then-cosine": warmup_then_cosine,
    "three-phases": lambda L, o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.5,
                                                               total_iters=3),
                                                    L.StepLR(o, step_size=2, gamma=0.7),
                                                    L.CosineAnnealingLR(o, T_max=9)],
                                                milestones=[3, 11]),
    "multistep": lambda L, o: L.MultiStepLR(o, milestones=[9, 3, 14, 14], gamma=0.6),
    "exponential": lambda L, o: L.ExponentialLR(o, gamma=0.93),
    "polynomial": lambda L, o: L.PolynomialLR(o, total_iters=17, power=2.5),
    "warm-restarts": lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=4, eta_min=1e-3),
    "warm-restarts-growing": lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    "cyclic-triangular": lambda L, o: L.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.05],
                                                step_size_up=4, step_size_down=3),
    "cyclic-triangular2": lambda L, o: L.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=5,
                                                  mode="triangular2"),
    "cyclic-exp-range": lambda L, o: L.CyclicLR(o, base_lr=[0.01, 0.02], max_lr=0.1,
                                                step_size_up=3, mode="exp_range", gamma=0.97,
                                                base_momentum=0.7, max_momentum=0.95),
    "one-cycle": lambda L, o: L.OneCycleLR(o, max_lr=[0.1, 0.3], total_steps=STEPS),
    "one-cycle-linear-three-phase": lambda L, o: L.OneCycleLR(
        o, max_lr=0.1, epochs=3, steps_per_epoch=10, pct_start=0.25, anneal_strategy="linear",
        three_phase=True, div_factor=10, final_div_factor=100),
    "warmup-then-warm-restarts": lambda L, o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.2, total_iters=4),
            L.CosineAnnealingWarmRestarts(o, T_0=5)], milestones=[4]),
}


def _momenta(optimizer):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in optimizer.param_groups]


def lr_sequence(make, lib, lib_lr, optimizer=None):
    """The lrs and momenta (beta1 for Adam) after construction and each step."""
    optimizer = optimizer or two_groups(lib)
    scheduler = make(lib_lr, optimizer)
    sequence = [scheduler.get_last_lr() + _momenta(optimizer)]
    for _ in range(STEPS):
        optimizer.step()
        scheduler.step()
        assert [g["lr"] for g in optimizer.param_groups] == scheduler.get_last_lr()
        sequence.append(scheduler.get_last_lr() + _momenta(optimizer))
    return np.array(sequence, dtype=np.float64)


@pytest.mark.parametrize("name", SCHEDULES)
def test_lr_sequence_matches_torch(name):
    torch = pytest.importorskip("torch")
    ours = lr_sequence(SCHEDULES[name], mpigrad, lr_scheduler)
    theirs = lr_sequence(SCHEDULES[name], torch, torch.optim.lr_scheduler)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)
    assert len(np.unique(ours[:, 0])) > 2  # the schedule does change the lr


def test_closed_forms_at_known_epochs():
    optimizer = one_group()
    cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=0.0)
    lrs = [cosine.get_last_lr()[0]]
    for _ in range(8):
        cosine.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    np.testing.assert_allclose(lrs, [1, 0.853553390593, 0.5, 0.146446609407, 0,
                                     0.146446609407, 0.5, 0.853553390593, 1], atol=1e-12)


def run(optimizer, scheduler, steps):
    lrs = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        lrs.append(list(scheduler.get_last_lr()))
    return lrs


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("optimizer_first", [True, False])
def test_state_dict_resume_gives_the_same_lrs_bit_for_bit(name, optimizer_first):
    make = SCHEDULES[name]
    optimizer = two_groups(mpigrad)
    scheduler = make(lr_scheduler, optimizer)
    straight = run(optimizer, scheduler, STEPS)

    optimizer = two_groups(mpigrad)
    scheduler = make(lr_scheduler, optimizer)
    first_part = run(optimizer, scheduler, 7)
    saved_optimizer, saved_scheduler = optimizer.state_dict(), scheduler.state_dict()

    optimizer = two_groups(mpigrad)
    if optimizer_first:  # torch's documented order is the other one; both must work
        optimizer.load_state_dict(saved_optimizer)
        scheduler = make(lr_scheduler, optimizer)
    else:
        scheduler = make(lr_scheduler, optimizer)
        optimizer.load_state_dict(saved_optimizer)
    scheduler.load_state_dict(saved_scheduler)
    assert first_part + run(optimizer, scheduler, STEPS - 7) == straight


def test_lambda_functions_are_left_out_of_the_state_dict():
    """As torch: a plain function is None in the state, a callable object its attributes."""
    optimizer = one_group()
    scheduler = lr_scheduler.LambdaLR(optimizer, lambda epoch: 2.0 ** -epoch)
    state = scheduler.state_dict()
    assert state["lr_lambdas"] == [None] and state["last_epoch"] == 0
    assert "optimizer" not in state


def test_sequential_state_dict_nests_the_schedulers_states():
    optimizer = one_group()
    scheduler = warmup_then_cosine(lr_scheduler, optimizer)
    for _ in range(6):
        scheduler.step()
    state = scheduler.state_dict()
    assert state["last_epoch"] == 6 and state["_milestones"] == [5]
    assert [s["last_epoch"] for s in state["_schedulers"]] == [4, 1]
    assert state["_schedulers"][1]["T_max"] == STEPS - 5


def test_loading_another_schedulers_state_is_refused():
    optimizer = one_group()
    step = lr_scheduler.StepLR(optimizer, step_size=2)
    cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=5)
    with pytest.raises(ValueError, match="expected a CosineAnnealingLR state dict with keys"):
        cosine.load_state_dict(step.state_dict())


def test_sequential_state_with_the_wrong_number_of_schedulers_is_refused():
    optimizer = one_group()
    scheduler = warmup_then_cosine(lr_scheduler, optimizer)
    state = scheduler.state_dict()
    state["_schedulers"] = state["_schedulers"][:1]
    with pytest.raises(ValueError, match="a list of 2 scheduler states"):
        scheduler.load_state_dict(state)


def test_resuming_with_last_epoch_needs_initial_lr():
    optimizer = one_group()
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(optimizer, step_size=2, last_epoch=3)


@pytest.mark.parametrize("make, error, message", [
    (lambda o: lr_scheduler.StepLR(np.zeros(1), step_size=2), TypeError, "not an Optimizer"),
    (lambda o: lr_scheduler.StepLR(o, step_size=0), ValueError, "step_size must be positive"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=0), ValueError, "T_max must be"),
    (lambda o: lr_scheduler.LinearLR(o, start_factor=0), ValueError,
     "Starting multiplicative factor"),
    (lambda o: lr_scheduler.LinearLR(o, end_factor=1.5), ValueError,
     "Ending multiplicative factor"),
    (lambda o: lr_scheduler.LinearLR(o, total_iters=0), ValueError, "total_iters must be"),
    (lambda o: lr_scheduler.LambdaLR(o, [abs, abs]), ValueError,
     "Expected 1 lr_lambdas, but got 2"),
    (lambda o: lr_scheduler.SequentialLR(o, [], milestones=[]), ValueError,
     "at least one scheduler"),
    (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.StepLR(o, 2)], milestones=[3]),
     ValueError, "one more than the number of milestone points"),
    (lambda o: lr_scheduler.SequentialLR(
        o, [lr_scheduler.StepLR(o, 2), lr_scheduler.StepLR(o, 2), lr_scheduler.StepLR(o, 2)],
        milestones=[5, 3]), ValueError, "milestones must be increasing"),
    (lambda o: lr_scheduler.SequentialLR(
        o, [lr_scheduler.StepLR(o, 2), lr_scheduler.StepLR(one_group(), 2)], milestones=[3]),
     ValueError, "same optimizer"),
])
def test_bad_arguments_are_refused(make, error, message):
    optimizer = one_group()
    with pytest.raises(error, match=message):
        make(optimizer)


@pytest.mark.parametrize("name", ["cyclic-triangular", "cyclic-exp-range", "one-cycle",
                                  "one-cycle-linear-three-phase"])
def test_cycled_beta1_of_adam_matches_torch(name):
    torch = pytest.importorskip("torch")

    def adam(lib):
        return lib.optim.Adam([{"params": [lib.tensor(np.zeros(2), requires_grad=True)]},
                               {"params": [lib.tensor(np.zeros(1), requires_grad=True)]}],
                              lr=0.1, betas=(0.9, 0.99))
    ours = lr_sequence(SCHEDULES[name], mpigrad, lr_scheduler, adam(mpigrad))
    theirs = lr_sequence(SCHEDULES[name], torch, torch.optim.lr_scheduler, adam(torch))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)
    assert len(np.unique(ours[:, -1])) > 2


def test_warm_restarts_at_fractional_epochs_match_torch():
    torch = pytest.importorskip("torch")
    sequences = []
    for lib, lib_lr in ((mpigrad, lr_scheduler), (torch, torch.optim.lr_scheduler)):
        optimizer = two_groups(lib)
        scheduler = lib_lr.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=3, eta_min=0.01)
        lrs = []
        for epoch in range(6):
            for i in range(4):
                scheduler.step(epoch + i / 4)
                lrs.append(scheduler.get_last_lr())
            scheduler.step()  # one more epoch from the fractional position, as torch allows
            lrs.append(scheduler.get_last_lr())
        sequences.append(np.array(lrs))
    np.testing.assert_allclose(*sequences, rtol=1e-12)


def test_one_cycle_refuses_to_step_past_its_total():
    scheduler = lr_scheduler.OneCycleLR(two_groups(mpigrad), max_lr=0.1, total_steps=3)
    for _ in range(3):
        scheduler.step()
    with pytest.raises(ValueError, match="Tried to step 4 times. The specified number of "
                                         "total steps is 3"):
        scheduler.step()


def plateau_run(lib, lib_lr, metrics, **options):
    optimizer = two_groups(lib)
    scheduler = lib_lr.ReduceLROnPlateau(optimizer, **options)
    lrs = []
    for value in metrics:
        optimizer.step()
        scheduler.step(value)
        lrs.append([g["lr"] for g in optimizer.param_groups] + scheduler.get_last_lr())
    return np.array(lrs), scheduler


PLATEAU_METRICS = [5.0, 4.0, 4.0, 3.9999, 4.1, 4.2, 3.0, 3.0, 3.1, 3.2, 3.3, 3.3, 2.0, 2.5,
                   2.6, 2.7, 2.8, 2.9, 3.0, 3.1]


@pytest.mark.parametrize("options", [
    {},
    {"patience": 1},
    {"patience": 2, "cooldown": 3, "factor": 0.5},
    {"mode": "max", "patience": 1, "threshold_mode": "abs", "threshold": 0.2},
    {"patience": 0, "min_lr": [0.05, 1e-4], "factor": 0.3},
    {"patience": 0, "min_lr": 0.0999, "eps": 1e-3},
])
def test_reduce_on_plateau_matches_torch(options):
    torch = pytest.importorskip("torch")
    ours, scheduler = plateau_run(mpigrad, lr_scheduler, PLATEAU_METRICS, **options)
    theirs, _ = plateau_run(torch, torch.optim.lr_scheduler, PLATEAU_METRICS, **options)
    np.testing.assert_allclose(ours, theirs, rtol=1e-15)
    assert isinstance(scheduler, lr_scheduler.LRScheduler)


def test_reduce_on_plateau_resumes_from_its_state_dict():
    straight, _ = plateau_run(mpigrad, lr_scheduler, PLATEAU_METRICS, patience=1)
    optimizer = two_groups(mpigrad)
    scheduler = lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)
    for value in PLATEAU_METRICS[:9]:
        scheduler.step(value)
    state, optimizer_state = scheduler.state_dict(), optimizer.state_dict()
    # Plain values only, so mpigrad.save can store it in a checkpoint.
    assert all(isinstance(v, (int, float, str, list)) for v in state.values())
    optimizer = two_groups(mpigrad)
    optimizer.load_state_dict(optimizer_state)
    scheduler = lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)
    scheduler.load_state_dict(state)
    rest = []
    for value in PLATEAU_METRICS[9:]:
        scheduler.step(value)
        rest.append([g["lr"] for g in optimizer.param_groups] + scheduler.get_last_lr())
    np.testing.assert_array_equal(np.array(rest), straight[9:])


@pytest.mark.parametrize("make, message", [
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=0),
     "Expected positive integer T_0, but got 0"),
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=0),
     "Expected integer T_mult >= 1, but got 0"),
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2).step(-1),
     "Expected non-negative epoch, but got -1"),
    (lambda o: lr_scheduler.CyclicLR(o, 0.1, 1.0, mode="sawtooth"),
     "mode is invalid and scale_fn is None"),
    (lambda o: lr_scheduler.CyclicLR(optim.Adagrad(o.param_groups[0]["params"]), 0.1, 1.0),
     "optimizer must support momentum or beta1"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1), "You must define either total_steps OR"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1, total_steps=0),
     "Expected positive integer total_steps, but got 0"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1, epochs=2, steps_per_epoch=-1),
     "Expected positive integer steps_per_epoch, but got -1"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1, total_steps=5, pct_start=1.5),
     "Expected float between 0 and 1 pct_start, but got 1.5"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1, total_steps=5, anneal_strategy="exp"),
     "anneal_strategy must be one of 'cos' or 'linear', instead got exp"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, factor=1.0), "Factor should be < 1.0."),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, mode="up"), "mode up is unknown!"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, threshold_mode="x"),
     "threshold mode x is unknown!"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, min_lr=[0.1, 0.2]),
     "expected 1 min_lrs, got 2"),
])
def test_new_schedulers_refuse_bad_arguments_with_torchs_messages(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make(one_group())
