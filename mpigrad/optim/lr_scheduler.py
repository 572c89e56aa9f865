"""Learning-rate schedulers, with torch.optim.lr_scheduler's names and semantics.

A scheduler sets each parameter group's `'lr'` from the group's
`'initial_lr'` (its base lr) and the number of `step()` calls so far,
`last_epoch`. Call `scheduler.step()` after `optimizer.step()`, once per
epoch or per iteration, whichever the schedule is counted in.

Every scheduler here computes the lr in closed form, from the base lr and
`last_epoch` alone (torch's `_get_closed_form_lr`), rather than by
updating the previous lr as torch's chainable forms do. The values agree
with torch's to rounding, do not drift over long runs, and a run resumed from
a checkpoint gets the same lrs bit for bit. The price: two schedulers cannot
act on one optimizer at the same time, each multiplying the other's lr; to
run schedules one after another, use `SequentialLR`. Linear warm-up
followed by cosine decay::

    warmup = LinearLR(optimizer, start_factor=0.01, total_iters=5)
    decay = CosineAnnealingLR(optimizer, T_max=epochs - 5)
    scheduler = SequentialLR(optimizer, [warmup, decay], milestones=[5])
"""

import math
import types
from bisect import bisect_right
from collections import Counter

from ..autograd.grad_mode import no_grad
from ..tensor import Tensor
from .optimizer import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "LinearLR",
           "PolynomialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR",
           "OneCycleLR", "SequentialLR", "ReduceLROnPlateau"]


def set_lr(group, lr):
    """A group's new lr; a Tensor lr (torch allows one) is filled in place, as torch does, so
    the user's tensor follows the schedule."""
    if isinstance(group["lr"], Tensor):
        with no_grad():
            group["lr"].fill_(float(lr))
    else:
        group["lr"] = lr


class LRScheduler:
    """Base class: a subclass defines `get_lr`, the lrs at `last_epoch`.

    `last_epoch=-1` starts a new schedule, recording each group's current
    lr as its `'initial_lr'`. To resume, create the scheduler as for a new
    run and call `load_state_dict`. The constructor performs the first
    `step()`, which sets the lrs for epoch 0.
    """

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                # A Tensor lr is filled in place at each step (below): its start is a copy.
                group.setdefault("initial_lr", group["lr"].clone()
                                 if isinstance(group["lr"], Tensor) else group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming an optimizer (last_epoch >= 0): load the "
                                   "optimizer's state dict first")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        # torch's bookkeeping, kept so that state dicts carry torch's keys both ways.
        self._step_count = 0
        self._get_lr_called_within_step = False
        self._is_initial = True
        self.step()
        self._is_initial = False

    def get_lr(self):
        """The lr of each parameter group at epoch `last_epoch`."""
        raise NotImplementedError

    def get_last_lr(self):
        """The lrs set by the latest `step()`, one per parameter group."""
        return self._last_lr

    def step(self):
        """Advance one epoch and set the optimizer's lrs for it."""
        self._step_count += 1
        self._move_to(self.last_epoch + 1)

    def state_dict(self):
        """Everything but the optimizer: `last_epoch`, `base_lrs`, the settings and torch's
        bookkeeping (`_step_count`, ...), under torch's keys, so that a state saved by torch
        loads here and the other way round."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict):
        """Restore a state from `state_dict` of the same kind of scheduler.

        The restored lrs are also put back into the optimizer, so it does not
        matter whether the optimizer's state is loaded before or after.
        """
        expected = self.state_dict().keys()
        if not isinstance(state_dict, dict) or state_dict.keys() != expected:
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ValueError(f"expected a {type(self).__name__} state dict with keys "
                             f"{sorted(expected)}, got {got}")
        self.__dict__.update(state_dict)
        self._apply_last_lr()

    def _move_to(self, epoch):
        self.last_epoch = epoch
        self._last_lr = self.get_lr()
        self._apply_last_lr()

    def _apply_last_lr(self):
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            set_lr(group, lr)

    def _undo_first_step(self):
        """Forget the step the constructor took, so that SequentialLR decides
        which scheduler sets the lr of epoch 0."""
        self.last_epoch -= 1


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch).

    `lr_lambda` is one function, or a list with one per parameter group.
    Functions cannot be saved: `state_dict` keeps None in their place (and the attributes
    of a callable object), as torch's, so pass the same ones when re-creating the scheduler
    to resume.
    """

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        groups = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != groups:
                raise ValueError(f"Expected {groups} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * lmbda(self.last_epoch)
                for lmbda, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        state = super().state_dict()
        state["lr_lambdas"] = _callable_states(self.lr_lambdas)
        return state

    def load_state_dict(self, state_dict):
        _restore_callable_states(self.lr_lambdas, state_dict.get("lr_lambdas"), "lr_lambdas")
        super().load_state_dict({**state_dict, "lr_lambdas": self.lr_lambdas})


def _callable_states(functions):
    """torch's record of user functions in a state dict: None for a plain function (which
    cannot be saved), the attributes of a callable object."""
    return [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
            for fn in functions]


def _restore_callable_states(functions, saved, key):
    if not isinstance(saved, list) or len(saved) != len(functions):
        raise ValueError(f"expected a list of {len(functions)} entries under {key!r}, got "
                         f"{saved!r}")
    for fn, attributes in zip(functions, saved):
        if attributes is not None:
            fn.__dict__.update(attributes)


class StepLR(LRScheduler):
    """Multiply the lr by `gamma` every `step_size` epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        if not step_size > 0:
            raise ValueError(f"step_size must be positive, got {step_size!r}")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size)
                for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by `gamma` at each of `milestones` (a milestone given twice, twice)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones = Counter(milestones)  # torch's type, so that states load both ways
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        # A dict when restored from mpigrad's checkpoint format, which stores a Counter so.
        passed = sum(count for milestone, count in self.milestones.items()
                     if milestone <= self.last_epoch)
        return [base_lr * self.gamma ** passed
                for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by `gamma` every epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the lr linearly from `start_factor` to `end_factor` times the
    base lr over `total_iters` epochs, then keep it: the usual warm-up."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and "
                             f"less or equal to 1, got {start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError(f"Ending multiplicative factor expected to be between 0 and 1, "
                             f"got {end_factor}")
        if not total_iters > 0:
            raise ValueError(f"total_iters must be positive, got {total_iters!r}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        done = min(self.total_iters, self.last_epoch)
        factor = self.start_factor + (self.end_factor - self.start_factor) * done / self.total_iters
        return [base_lr * factor for base_lr in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay the lr to 0 over `total_iters` epochs as (1 - epoch / total_iters) ** power."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        factor = (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
        return [base_lr * factor for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.

    The lr falls from the base lr to `eta_min` over `T_max` epochs; past
    that it rises again along the same cosine, as torch's does.
    """

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if not T_max > 0:
            raise ValueError(f"T_max must be positive, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        cosine = 1 + math.cos(math.pi * self.last_epoch / self.T_max)
        return [self.eta_min + (base_lr - self.eta_min) * cosine / 2
                for base_lr in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from the base lr to `eta_min` over `T_0` epochs, then a restart; each
    period is `T_mult` times the one before (SGDR).

    `step(epoch)` jumps to a fractional epoch, for a schedule stepped every iteration
    (`scheduler.step(epoch + i / iters)`); a plain `step()` then goes on one epoch from there,
    as torch's does.
    """

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type "
                             f"{type(eta_min)}")
        self.T_0 = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self._position = float(last_epoch)
        super().__init__(optimizer, last_epoch)

    def step(self, epoch=None):
        if epoch is None:
            self._move_to(self._position + 1)
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        else:
            self._move_to(epoch)

    def _move_to(self, position):
        self._position = float(position)
        super()._move_to(math.floor(position))

    def _period(self):
        """(epochs into the current period, the period's length) at the current position."""
        if self._position < self.T_0 or self.T_mult == 1:
            return self._position % self.T_0, self.T_0
        restarts = int(math.log(self._position / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
        start = self.T_0 * (self.T_mult ** restarts - 1) / (self.T_mult - 1)
        return self._position - start, self.T_0 * self.T_mult ** restarts

    def state_dict(self):
        """torch's layout: the position as `T_cur` (epochs into the current period) and `T_i`
        (its length)."""
        state = super().state_dict()
        del state["_position"]
        state["T_cur"], state["T_i"] = self._period()
        return state

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        into, length = self.__dict__.pop("T_cur"), self.__dict__.pop("T_i")
        if self.T_mult == 1:
            # last_epoch is the position rounded down, which fixes the period it lies in.
            start = math.ceil((self.last_epoch - into) / self.T_0) * self.T_0
        else:
            start = self.T_0 * (length / self.T_0 - 1) / (self.T_mult - 1)
        self._position = float(start + into)

    def get_lr(self):
        into, length = self._period()
        cosine = 1 + math.cos(math.pi * into / length)
        return [self.eta_min + (base_lr - self.eta_min) * cosine / 2
                for base_lr in self.base_lrs]

    def _undo_first_step(self):
        super()._undo_first_step()
        self._position -= 1


def _uses_beta1(optimizer):
    """Whether the cycled momentum is Adam's beta1 (an optimizer with betas) rather than
    'momentum' (SGD, RMSprop); torch's `use_beta1`."""
    if "betas" in optimizer.defaults:
        return True
    if "momentum" in optimizer.defaults:
        return False
    raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option "
                     "enabled")


def _set_momentum(group, use_beta1, momentum):
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


def _per_group(name, value, optimizer):
    groups = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != groups:
            raise ValueError(f"expected {groups} values for {name}, got {len(value)}")
        return list(value)
    return [value] * groups


class CyclicLR(LRScheduler):
    """The lr cycles between `base_lr` and `max_lr` (Smith's cyclical learning rates), rising
    over `step_size_up` steps and falling over `step_size_down`; with `cycle_momentum`, the
    momentum (or Adam's beta1) cycles the opposite way between `max_momentum` and
    `base_momentum`. Counted in iterations: call `step()` after every batch.

    A custom `scale_fn` cannot be saved: `state_dict` leaves it out, so pass the same one
    when re-creating the scheduler to resume.
    """

    _MODES = {"triangular": "cycle", "triangular2": "cycle", "exp_range": "iterations"}

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None,
                 mode="triangular", gamma=1.0, scale_fn=None, scale_mode="cycle",
                 cycle_momentum=True, base_momentum=0.8, max_momentum=0.9, last_epoch=-1):
        if mode not in self._MODES and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        base_lrs = _per_group("base_lr", base_lr, optimizer)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                set_lr(group, lr)
                group["initial_lr"] = lr
        self.max_lrs = _per_group("max_lr", max_lr, optimizer)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        self.mode = mode
        self.gamma = gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else self._MODES[mode]
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _uses_beta1(optimizer)
            max_momentums = _per_group("max_momentum", max_momentum, optimizer)
            base_momentums = _per_group("base_momentum", base_momentum, optimizer)
            if last_epoch == -1:
                for m_max, m_base, group in zip(max_momentums, base_momentums,
                                                optimizer.param_groups):
                    _set_momentum(group, self.use_beta1, m_max)
                    group["max_momentum"], group["base_momentum"] = m_max, m_base
            self.base_momentums = [g["base_momentum"] for g in optimizer.param_groups]
            self.max_momentums = [g["max_momentum"] for g in optimizer.param_groups]
        super().__init__(optimizer, last_epoch)

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def _heights(self):
        """(the fraction of the way up, the scale) at the current step."""
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        up = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        return up, self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)

    def get_lr(self):
        up, scale = self._heights()
        return [base_lr + (max_lr - base_lr) * up * scale
                for base_lr, max_lr in zip(self.base_lrs, self.max_lrs)]

    def _apply_last_lr(self):
        super()._apply_last_lr()
        if self.cycle_momentum:
            up, scale = self._heights()
            for group, m_base, m_max in zip(self.optimizer.param_groups, self.base_momentums,
                                            self.max_momentums):
                _set_momentum(group, self.use_beta1, m_max - (m_max - m_base) * up * scale)

    def state_dict(self):
        state = super().state_dict()
        if self._scale_fn_custom is not None:
            state["_scale_fn_custom"] = _callable_states([self._scale_fn_custom])[0]
        return state

    def load_state_dict(self, state_dict):
        if self._scale_fn_custom is not None:
            _restore_callable_states([self._scale_fn_custom],
                                     [state_dict.get("_scale_fn_custom")], "_scale_fn_custom")
        super().load_state_dict({**state_dict, "_scale_fn_custom": self._scale_fn_custom})


_PHASE_KEYS = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")


class OneCycleLR(LRScheduler):
    """The 1cycle policy: the lr rises from max_lr / div_factor to `max_lr` over the first
    `pct_start` of `total_steps`, then anneals to max_lr / div_factor / final_div_factor (with
    `three_phase`, back down to the start first); momentum (or Adam's beta1) moves the
    opposite way between `max_momentum` and `base_momentum`. Call `step()` after every batch;
    stepping past `total_steps` is an error, as in torch.
    """

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND "
                                 "steps_per_epoch)")
            for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if not isinstance(value, int) or value <= 0:
                    raise ValueError(f"Expected positive integer {name}, but got {value}")
            total_steps = epochs * steps_per_epoch
        elif not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        if not 0 <= pct_start <= 1 or not isinstance(pct_start, (int, float)):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self.total_steps = total_steps
        self._anneal_func_type = anneal_strategy
        rise_end = float(pct_start * total_steps) - 1
        if three_phase:
            phases = [(rise_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr",
                       "base_momentum", "max_momentum"),
                      (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            phases = [(rise_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        # Each phase ends at a step and moves between two group keys; torch's layout.
        self._schedule_phases = [dict(zip(_PHASE_KEYS, phase)) for phase in phases]
        if last_epoch == -1:
            for lr, group in zip(_per_group("max_lr", max_lr, optimizer),
                                 optimizer.param_groups):
                group["initial_lr"] = lr / div_factor
                group["max_lr"] = lr
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _uses_beta1(optimizer)
            if last_epoch == -1:
                for m_max, m_base, group in zip(
                        _per_group("max_momentum", max_momentum, optimizer),
                        _per_group("base_momentum", base_momentum, optimizer),
                        optimizer.param_groups):
                    _set_momentum(group, self.use_beta1, m_max)
                    group["max_momentum"], group["base_momentum"] = m_max, m_base
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, fraction):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * fraction) + 1)
        return (end - start) * fraction + start

    def _phase_values(self, group):
        """(lr, momentum) of `group` at the current step."""
        start = 0
        for i, phase in enumerate(self._schedule_phases):
            end, lr_from, lr_to, m_from, m_to = (phase[key] for key in _PHASE_KEYS)
            if self.last_epoch <= end or i == len(self._schedule_phases) - 1:
                fraction = (self.last_epoch - start) / (end - start)
                momentum = (self._anneal(group[m_from], group[m_to], fraction)
                            if self.cycle_momentum else None)
                return self._anneal(group[lr_from], group[lr_to], fraction), momentum
            start = end
        raise AssertionError("the last phase always matches")

    def get_lr(self):
        if self.last_epoch > self.total_steps:
            raise ValueError(f"Tried to step {self.last_epoch} times. The specified number of "
                             f"total steps is {self.total_steps}")
        return [self._phase_values(group)[0] for group in self.optimizer.param_groups]

    def _apply_last_lr(self):
        super()._apply_last_lr()
        if self.cycle_momentum:
            for group in self.optimizer.param_groups:
                _set_momentum(group, self.use_beta1, self._phase_values(group)[1])


class SequentialLR(LRScheduler):
    """Run `schedulers` one after another, switching at each of `milestones`.

    `schedulers[i]` is in charge from epoch `milestones[i - 1]` on, and
    starts its own schedule at epoch 0 there.
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        if not schedulers:
            raise ValueError("SequentialLR expects at least one scheduler, but got no scheduler.")
        for i, scheduler in enumerate(schedulers):
            if getattr(scheduler, "optimizer", None) is not optimizer:
                raise ValueError(f"SequentialLR expects all schedulers to belong to the same "
                                 f"optimizer, but the {type(scheduler).__name__} at index {i} "
                                 "has a different one")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("SequentialLR expects number of schedulers provided to be one more "
                             f"than the number of milestone points, but got number of "
                             f"schedulers {len(schedulers)} and the number of milestones to be "
                             f"equal to {len(milestones)}")
        if list(milestones) != sorted(milestones):
            raise ValueError(f"milestones must be increasing, got {list(milestones)}")
        self.optimizer = optimizer
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            set_lr(group, group["initial_lr"])
        self._undo_first_step()
        active = self._schedulers[bisect_right(self._milestones, 0)]
        active._step_count = 0  # its first step is the initial one again, as in torch
        active.step()
        self._last_lr = active.get_last_lr()

    def step(self):
        self.last_epoch += 1
        index = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler._move_to(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self):
        state = {key: value for key, value in self.__dict__.items()
                 if key not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [scheduler.state_dict() for scheduler in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        saved = state.pop("_schedulers", None)
        if not isinstance(saved, list) or len(saved) != len(self._schedulers):
            raise ValueError(f"expected a SequentialLR state dict with a list of "
                             f"{len(self._schedulers)} scheduler states under '_schedulers'")
        for scheduler, scheduler_state in zip(self._schedulers, saved):
            scheduler.load_state_dict(scheduler_state)
        # Last, so that the active scheduler's lrs are the ones left in the optimizer.
        super().load_state_dict({**state, "_schedulers": self._schedulers})

    def _undo_first_step(self):
        for scheduler in self._schedulers:
            scheduler._undo_first_step()


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by `factor` when `metrics` passed to `step(metrics)` has not improved
    for `patience` epochs (by more than `threshold`, relative or absolute), then wait
    `cooldown` epochs before counting again; never below `min_lr`, and never by less than
    `eps`. The only scheduler here driven by a measured value rather than the epoch count.
    """

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        groups = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != groups:
                raise ValueError(f"expected {groups} min_lrs, got {len(min_lr)}")
            self.min_lrs = list(min_lr)
            self.default_min_lr = None
        else:
            self.min_lrs = [min_lr] * groups
            self.default_min_lr = min_lr
        if mode not in ("min", "max"):
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.optimizer = optimizer
        self.mode = mode
        self.factor = factor
        self.patience = patience
        self.threshold = threshold
        self.threshold_mode = threshold_mode
        self.cooldown = cooldown
        self.eps = eps
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.best = self.mode_worse
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self, metrics):
        current = float(metrics)
        self.last_epoch += 1
        if self._is_better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._match_min_lrs_to_groups()
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, min_lr)
                if old - new > self.eps:
                    set_lr(group, new)
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _match_min_lrs_to_groups(self):
        """A group added after construction takes the single min_lr given, as torch's."""
        groups = len(self.optimizer.param_groups)
        if groups == len(self.min_lrs):
            return
        if self.default_min_lr is None:
            raise RuntimeError(f"The number of param groups in the `optimizer` ({groups}) "
                               f"differs from when `ReduceLROnPlateau` was initialized "
                               f"({len(self.min_lrs)}), usually due to a new param group being "
                               "added to the optimizer. Please modify the `min_lrs` field to "
                               "match the length of the `optimizer` param groups.")
        self.min_lrs = [self.default_min_lr] * groups

    def _is_better(self, current):
        if self.mode == "min":
            bar = (self.best * (1 - self.threshold) if self.threshold_mode == "rel"
                   else self.best - self.threshold)
            return current < bar
        bar = (self.best * (1 + self.threshold) if self.threshold_mode == "rel"
               else self.best + self.threshold)
        return current > bar
