"""Join: training to the end when ranks have different numbers of batches.

    with Join([ddp_model]):
        for x, y in my_batches:          # some ranks have fewer
            loss_fn(ddp_model(x), y).backward()
            opt.step()

Inside the context, every forward of a Joinable first takes part in a small "who is still
active?" Allreduce. A rank that leaves the loop ("joins") keeps answering it from
`Join.__exit__`, and while some ranks are still active it runs each Joinable's
`join_hook().main_hook()` once per iteration of theirs, which shadows that iteration's
collectives (for DistributedDataParallel: reduce zero-filled buckets in the same order,
so the active ranks' averages are over the initial world size). When nobody is active any
more, every rank runs `post_hook(is_last_joiner)` (DistributedDataParallel copies the model of
a rank that trained to the end to all ranks) and leaves.

Every forward inside the context must be followed by a synchronized backward (no no_sync, no
evaluation forward with gradients enabled), since the joined ranks shadow a full iteration.
"""
import numpy as np
from mpi4py import MPI

from ..fault.watchdog import blocked

__all__ = ["Join", "Joinable", "JoinHook", "notify_join_context"]


class JoinHook:
    """What a joined rank runs: `main_hook()` once per iteration of the still-active ranks,
    `post_hook(is_last_joiner)` once everyone has joined."""

    def main_hook(self):
        pass

    def post_hook(self, is_last_joiner):
        pass


class Joinable:
    """A class whose per-iteration collectives Join can shadow. It provides `join_hook()`,
    `join_device` and `join_process_group`, and calls `notify_join_context(self)` (also
    `Join.notify_join_context`) at the start of each iteration while
    `self._join_config.enable` is set."""

    def join_hook(self, **kwargs):
        raise NotImplementedError

    @property
    def join_device(self):
        return "cpu"

    @property
    def join_process_group(self):
        raise NotImplementedError


class JoinConfig:
    """What Join gives each Joinable for the context's lifetime: whether it is enabled,
    whether this Joinable is the one that takes part in the activity vote (`is_first`), and
    the communicator (`comm`, Join's own duplicate of `process_group`'s) the vote runs on."""

    def __init__(self, enable, is_first, process_group, comm):
        self.enable = enable
        self.is_first = is_first
        self.process_group = process_group
        self.comm = comm
        self.active = None


def notify_join_context(joinable):
    """Called by a Joinable at the start of each iteration: tell the joined ranks this one is
    still active. Returns the 0/1 vector of active ranks (None outside an enabled Join)."""
    config = joinable._join_config
    if config is None or not config.enable:
        return None
    if config.is_first:
        config.active = active_ranks(config, True)
    return config.active


def active_ranks(config, active):
    """The vote: a 0/1 vector over the ranks saying which are still active."""
    flags = np.zeros(config.comm.Get_size(), np.int64)
    flags[config.comm.Get_rank()] = int(active)
    with blocked(config.process_group, "Join: the vote on which ranks are still active"):
        config.comm.Allreduce(MPI.IN_PLACE, [flags, MPI.INT64_T], MPI.SUM)
    return flags


class Join:
    """The context manager: see the module docstring. `joinables` share one process group."""

    def __init__(self, joinables, enable=True, throw_on_early_termination=False, **kwargs):
        joinables = list(joinables)
        if not joinables:
            raise ValueError("Join needs at least one Joinable")
        groups = {id(j.join_process_group) for j in joinables}
        if len(groups) > 1:
            raise ValueError("all Joinables of one Join must use the same process group")
        self._joinables = joinables
        self._hooks = [j.join_hook(**kwargs) for j in joinables]
        self._enable = enable
        self._throw = throw_on_early_termination
        self._process_group = joinables[0].join_process_group
        self._config = None

    def __enter__(self):
        comm = None
        if self._enable:
            with blocked(self._process_group, "Join: duplicating the group's communicator"):
                comm = self._process_group.comm.Dup()  # collective
        self._config = JoinConfig(self._enable, True, self._process_group, comm)
        for k, joinable in enumerate(self._joinables):
            joinable._join_config = JoinConfig(self._enable, k == 0, self._process_group, comm)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if not self._enable or exc_type is not None:
                # An exception: leave without the protocol, which would need every rank.
                return False
            is_last_joiner = True
            while True:
                active = active_ranks(self._config, False)
                if not active.any():
                    break
                if self._throw:
                    rank = self._config.comm.Get_rank()
                    raise RuntimeError(f"rank {rank} ran out of inputs before "
                                       f"rank(s) {np.flatnonzero(active).tolist()} "
                                       f"(Join(throw_on_early_termination=True))")
                for joinable, hook in zip(self._joinables, self._hooks):
                    joinable._join_config.active = active
                    hook.main_hook()
                is_last_joiner = False
            for hook in self._hooks:
                hook.post_hook(is_last_joiner)
            return False
        finally:
            for joinable in self._joinables:
                joinable._join_config = None
            if self._config.comm is not None:
                self._config.comm.Free()
            self._config = None

    notify_join_context = staticmethod(notify_join_context)
