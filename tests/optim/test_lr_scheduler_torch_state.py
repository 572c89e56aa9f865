"""Scheduler state dicts in torch's layout: the same keys, and a state saved by one library
resumes the schedule in the other."""
import math

import pytest

torch = pytest.importorskip("torch")

import mpigrad as mg  # noqa: E402


class Halving:
    """A callable object: torch saves its attributes in the LambdaLR state."""

    def __init__(self):
        self.rate = 0.5

    def __call__(self, epoch):
        return self.rate ** epoch


def build(lib, name, beta1=False):
    params = [lib.ones(2, requires_grad=True)]
    optimizer = (lib.optim.Adam(params, lr=0.1) if beta1
                 else lib.optim.SGD(params, lr=0.1, momentum=0.9))
    schedulers = lib.optim.lr_scheduler
    make = {
        "StepLR": lambda: schedulers.StepLR(optimizer, 3, gamma=0.5),
        "CosineAnnealingLR": lambda: schedulers.CosineAnnealingLR(optimizer, 10, eta_min=0.01),
        "OneCycleLR": lambda: schedulers.OneCycleLR(optimizer, 1.0, total_steps=20,
                                                    three_phase=True),
        "LambdaLR": lambda: schedulers.LambdaLR(optimizer, [Halving()]),
        "LambdaLR-function": lambda: schedulers.LambdaLR(optimizer, lambda e: 0.9 ** e),
        "LinearLR": lambda: schedulers.LinearLR(optimizer, 0.1, total_iters=4),
        "SequentialLR": lambda: schedulers.SequentialLR(
            optimizer, [schedulers.LinearLR(optimizer, 0.1, total_iters=3),
                        schedulers.StepLR(optimizer, 2)], [3]),
        "ReduceLROnPlateau": lambda: schedulers.ReduceLROnPlateau(optimizer, patience=1),
        "MultiStepLR": lambda: schedulers.MultiStepLR(optimizer, [2, 5]),
        "ExponentialLR": lambda: schedulers.ExponentialLR(optimizer, 0.9),
        "PolynomialLR": lambda: schedulers.PolynomialLR(optimizer, 6),
        "CyclicLR": lambda: schedulers.CyclicLR(optimizer, 0.01, 0.1, step_size_up=3),
        "CosineAnnealingWarmRestarts": lambda: schedulers.CosineAnnealingWarmRestarts(
            optimizer, 3, T_mult=2),
        "CosineAnnealingWarmRestarts-1": lambda: schedulers.CosineAnnealingWarmRestarts(
            optimizer, 3),
    }[name]
    return optimizer, make()


def advance(optimizer, scheduler, steps, start=0):
    lrs = []
    for step in range(start, start + steps):
        optimizer.step()
        if isinstance(scheduler, (torch.optim.lr_scheduler.ReduceLROnPlateau,
                                  mg.optim.lr_scheduler.ReduceLROnPlateau)):
            scheduler.step(1.0 / (1 + step % 3))
        else:
            scheduler.step()
        lrs.append(float(optimizer.param_groups[0]["lr"]))
    return lrs


NAMES = ["StepLR", "CosineAnnealingLR", "OneCycleLR", "LambdaLR", "LambdaLR-function",
         "LinearLR", "SequentialLR", "ReduceLROnPlateau", "MultiStepLR", "ExponentialLR",
         "PolynomialLR", "CyclicLR", "CosineAnnealingWarmRestarts",
         "CosineAnnealingWarmRestarts-1"]


def _same(ours, theirs, key):
    if isinstance(theirs, dict):
        assert ours.keys() == theirs.keys(), key
        for k in theirs:
            _same(ours[k], theirs[k], f"{key}.{k}")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), key
        for a, b in zip(ours, theirs):
            _same(a, b, key)
    elif isinstance(theirs, float):
        assert math.isclose(ours, theirs, rel_tol=1e-12, abs_tol=1e-15) or ours == theirs, key
    elif key not in ("_scale_fn_custom",):
        assert ours == theirs, key


# beta1: Adam's, where the schedule cycles momentum (torch's use_beta1).
@pytest.mark.parametrize("name, beta1", [(name, False) for name in NAMES]
                         + [("OneCycleLR", True), ("CyclicLR", True)])
def test_state_dict_keys_and_values_are_torchs(name, beta1):
    (our_opt, ours), (their_opt, theirs) = build(mg, name, beta1), build(torch, name, beta1)
    assert advance(our_opt, ours, 5) == pytest.approx(advance(their_opt, theirs, 5),
                                                      rel=1e-12)
    our_state, their_state = ours.state_dict(), theirs.state_dict()
    assert sorted(our_state) == sorted(their_state)
    for key, value in their_state.items():
        if key == "_schedulers":
            for a, b in zip(our_state[key], value):
                _same(a, b, key)
        else:
            _same(our_state[key], value, key)


@pytest.mark.parametrize("name", NAMES)
def test_a_state_saved_by_either_library_resumes_in_the_other(name):
    (our_opt, ours), (their_opt, theirs) = build(mg, name), build(torch, name)
    expected = advance(their_opt, theirs, 4)
    expected += advance(their_opt, theirs, 4, start=4)
    # torch -> mpigrad
    their_opt, theirs = build(torch, name)
    advance(their_opt, theirs, 4)
    our_opt, ours = build(mg, name)
    if name == "LambdaLR":
        ours.lr_lambdas[0].rate = 0.0  # restored from torch's saved attributes below
    our_opt.load_state_dict(their_opt.state_dict())
    ours.load_state_dict(theirs.state_dict())
    assert advance(our_opt, ours, 4, start=4) == pytest.approx(expected[4:], rel=1e-12)
    # mpigrad -> torch
    our_opt, ours = build(mg, name)
    advance(our_opt, ours, 4)
    their_opt, theirs = build(torch, name)
    their_opt.load_state_dict(our_opt.state_dict())
    theirs.load_state_dict(ours.state_dict())
    assert advance(their_opt, theirs, 4, start=4) == pytest.approx(expected[4:], rel=1e-12)


@pytest.mark.parametrize("t_mult", [1, 2])
@pytest.mark.parametrize("epoch", [4.5, 10.25, 2.0])
def test_warm_restarts_at_a_fractional_epoch_resume_across_libraries(t_mult, epoch):
    def made(lib):
        optimizer = lib.optim.SGD([lib.ones(2, requires_grad=True)], lr=0.1)
        return optimizer, lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            optimizer, 3, T_mult=t_mult)

    for source, target in ((mg, torch), (torch, mg)):
        (source_opt, saved), (target_opt, resumed) = made(source), made(target)
        saved.step(epoch)
        resumed.load_state_dict(saved.state_dict())
        assert resumed.state_dict()["last_epoch"] == saved.state_dict()["last_epoch"]
        for _ in range(7):
            saved.step()
            resumed.step()
            assert float(target_opt.param_groups[0]["lr"]) == pytest.approx(
                float(source_opt.param_groups[0]["lr"]), rel=1e-12)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])  # mpigrad's checkpoint format; torch's
@pytest.mark.parametrize("name", NAMES)
def test_states_in_torchs_layout_survive_both_save_formats(name, suffix, tmp_path):
    """mpigrad's checkpoint format stores no pickle: the torch-shaped state (a Counter of
    milestones, phase dicts, lr_lambdas' None) must round-trip through it and through the
    weights_only pickle, and resume the schedule."""
    optimizer, scheduler = build(mg, name)
    advance(optimizer, scheduler, 4)
    expected_optimizer, expected = build(mg, name)
    expected_lrs = advance(expected_optimizer, expected, 8)[4:]
    mg.save({"scheduler": scheduler.state_dict(), "optimizer": optimizer.state_dict()},
            tmp_path / f"state{suffix}")
    saved = mg.load(tmp_path / f"state{suffix}")
    optimizer, scheduler = build(mg, name)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    assert advance(optimizer, scheduler, 4, start=4) == pytest.approx(expected_lrs, rel=1e-12)
