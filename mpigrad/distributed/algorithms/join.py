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

from ..joinable import JoinConfig, JoinHook, Joinable, active_ranks, notify_join_context
from ..watchdog import blocked

__all__ = ["Join", "Joinable", "JoinHook"]


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
