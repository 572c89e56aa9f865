"""What a class implements to be shadowed by `algorithms.join.Join`, and the per-iteration
"who is still active?" step it calls (see algorithms/join.py for the protocol).

It lives here, below DistributedDataParallel, so that DDP (a Joinable) does not depend on
`algorithms/`, which is built on DDP.
"""
import numpy as np
from mpi4py import MPI

from .watchdog import blocked

__all__ = ["Joinable", "JoinHook", "notify_join_context"]


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
