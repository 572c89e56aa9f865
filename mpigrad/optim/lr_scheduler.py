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
from bisect import bisect_right

from .optimizer import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "LinearLR", "CosineAnnealingLR",
           "SequentialLR"]


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
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming an optimizer (last_epoch >= 0): load the "
                                   "optimizer's state dict first")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self):
        """The lr of each parameter group at epoch `last_epoch`."""
        raise NotImplementedError

    def get_last_lr(self):
        """The lrs set by the latest `step()`, one per parameter group."""
        return self._last_lr

    def step(self):
        """Advance one epoch and set the optimizer's lrs for it."""
        self._move_to(self.last_epoch + 1)

    def state_dict(self):
        """Everything but the optimizer: `last_epoch`, `base_lrs` and the settings."""
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
            group["lr"] = lr

    def _undo_first_step(self):
        """Forget the step the constructor took, so that SequentialLR decides
        which scheduler sets the lr of epoch 0."""
        self.last_epoch -= 1


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch).

    `lr_lambda` is one function, or a list with one per parameter group.
    Functions cannot be saved: `state_dict` leaves them out, so pass
    the same ones when re-creating the scheduler to resume.
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
        del state["lr_lambdas"]
        return state


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
            group["lr"] = group["initial_lr"]
        self._undo_first_step()
        active = self._schedulers[bisect_right(self._milestones, 0)]
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
