"""Learning-rate schedulers: lr sequences against torch's, state dicts, errors."""

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
}


def lr_sequence(make, lib, lib_lr):
    optimizer = two_groups(lib)
    scheduler = make(lib_lr, optimizer)
    sequence = [scheduler.get_last_lr()]
    for _ in range(STEPS):
        optimizer.step()
        scheduler.step()
        assert [g["lr"] for g in optimizer.param_groups] == scheduler.get_last_lr()
        sequence.append(scheduler.get_last_lr())
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
    optimizer = one_group()
    scheduler = lr_scheduler.LambdaLR(optimizer, lambda epoch: 2.0 ** -epoch)
    state = scheduler.state_dict()
    assert "lr_lambdas" not in state and state["last_epoch"] == 0
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
