"""Process groups: the default group over MPI.COMM_WORLD (or a given communicator), and
sub-groups backed by MPI sub-communicators. Rank arguments everywhere are ranks of the
default group ("global" ranks), as in torch.distributed.
"""
import datetime
import numbers
import os
import re
import warnings
import weakref
import zlib

import numpy as np
from mpi4py import MPI

from . import abort, checks, watchdog

_CHECK_ENV = "MPIGRAD_CHECK_COLLECTIVES"
_ON, _OFF = ("1", "true", "on", "yes"), ("0", "false", "off", "no")
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # torch's default for its CPU backend


class ProcessGroup:
    """A set of ranks and the MPI communicators they talk over.

    `comm` is the communicator this group's collectives and point-to-point messages use. It is
    a communicator of mpigrad's own (a duplicate, or a sub-communicator), so traffic the user
    sends on the communicator they passed in never matches ours. Code built on this layer
    (DistributedDataParallel) may run MPI operations on it directly. `ranks[i]` is the global
    rank of this group's rank i. `timeout` (seconds) bounds how long a rank may stay blocked
    in one of this group's calls (see `watchdog`).
    """

    def __init__(self, comm, ranks, check_collectives, timeout, name):
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.comm = comm
        self.ranks = tuple(ranks)
        self.check_collectives = check_collectives
        self.timeout = timeout
        self.name = name
        # Separate contexts keep each kind of internal traffic from matching the user's own
        # messages on `comm`: the cross-rank signature checks and the ring algorithm's
        # messages on one, gradients sent back by differentiable send/recv on the other.
        self._internal_comm = duplicate(comm, f"creating {name}")
        self._autograd_comm = duplicate(comm, f"creating {name}")
        self._collective_count = 0
        # Communicators of code built on this group (DDP's Channel), freed with the group.
        self._dependents = weakref.WeakSet()

    def rank(self):
        return self.comm.Get_rank()

    def size(self):
        return self.comm.Get_size()

    def __repr__(self):
        return f"<ProcessGroup: {self.name}, rank {self.rank()} of {self.size()}>"

    def _free(self):
        for dependent in list(self._dependents):
            dependent.close()
        for comm in (self._autograd_comm, self._internal_comm, self.comm):
            comm.Free()
        self.comm = None


# MPICH's message for an exhausted context-id space; other MPIs word it differently.
_OUT_OF_COMMUNICATORS = re.compile(r"Too many communicators \(\d+/(\d+) free")


def duplicate(comm, what, make=None):
    """`comm.Dup()` (or `make()`), with MPI's cryptic error for running out of communicators
    replaced by one that says what holds them and how to free them."""
    try:
        return comm.Dup() if make is None else make()
    except MPI.Exception as err:
        text = err.Get_error_string()
        limit = _OUT_OF_COMMUNICATORS.search(text)
        if limit is None and "communicator" not in text.lower():
            raise
        allowed = f"this MPI allows {limit.group(1)}" if limit else "MPI limits how many"
        raise RuntimeError(
            f"{what}: MPI has run out of communicators ({allowed} per process). Each live "
            f"process group holds 3 ({len(_live_groups)} are live) and each live "
            f"DistributedDataParallel 2. Free what is no longer needed: "
            f"destroy_process_group(group) for groups, and drop DistributedDataParallel "
            f"wrappers (del model; their communicators are freed when they are collected)."
        ) from err


class _NonGroupMember:
    def __repr__(self):
        return "GroupMember.NON_GROUP_MEMBER"


class GroupMember:
    """`GroupMember.WORLD` is the default group once `init_process_group` has run.
    `new_group` returns `NON_GROUP_MEMBER` on the ranks it does not include."""
    WORLD = None
    NON_GROUP_MEMBER = _NonGroupMember()


group = GroupMember  # torch.distributed spells it both ways: `group.WORLD`

_live_groups = []
_local = {"rank": None, "size": None}


def is_available():
    return True


def is_initialized():
    return GroupMember.WORLD is not None


def init_process_group(comm=None, *, backend=None, timeout=DEFAULT_TIMEOUT,
                       abort_on_exception=None):
    """Start the default process group over `comm` (MPI.COMM_WORLD when None).

    Works under mpiexec/mpirun, under Slurm's `srun --mpi=pmi2`, and in a plain `python`
    process (a world of size 1): mpi4py has already initialized MPI from whatever launched us.
    `backend` is accepted so torch scripts port unchanged; only "mpi" exists here.
    `timeout` (a timedelta): a rank blocked this long in one collective or message aborts
    the job, saying what it was waiting for (see `watchdog`).
    `abort_on_exception`: an uncaught exception on any rank aborts the whole job instead of
    leaving the other ranks waiting (see `abort`). None (the default) reads
    MPIGRAD_ABORT_ON_EXCEPTION, which is on unless set to 0; `set_abort_on_exception`
    changes it later.
    """
    if isinstance(comm, str):
        raise TypeError(f"init_process_group's first argument is an mpi4py communicator, not a "
                        f"backend name (got {comm!r}); mpigrad always uses MPI")
    if backend not in (None, "mpi"):
        raise ValueError(f"backend={backend!r} is not available: mpigrad only speaks MPI "
                         f"(use backend='mpi' or leave it out)")
    if is_initialized():
        raise RuntimeError("init_process_group was already called; call "
                           "destroy_process_group() first to start a new default group")
    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py intracommunicator such as MPI.COMM_WORLD, "
                        f"got {comm!r}")
    seconds = _seconds(timeout)
    abort_setting = abort.setting(abort_on_exception)
    check = _agreed_check_setting(comm)
    world = ProcessGroup(duplicate(comm, "init_process_group"), range(comm.Get_size()), check,
                         seconds, "the default group")
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    _local.update(rank=node.Get_rank(), size=node.Get_size())
    node.Free()
    GroupMember.WORLD = world
    _live_groups.append(world)
    abort.set_abort_on_exception(abort_setting)
    watchdog.start(world.comm)


def _agreed_check_setting(comm):
    """Read MPIGRAD_CHECK_COLLECTIVES on every rank and make sure all read the same value: the
    check is itself a collective, so ranks that disagree about running it would deadlock."""
    # Once, at start-up: pickling a few short strings is fine here.
    settings = comm.allgather(os.environ.get(_CHECK_ENV, "1").strip().lower())
    bad = [f"{value!r} on rank {r}" for r, value in enumerate(settings)
           if value not in _ON + _OFF]
    if bad:
        raise ValueError(f"{_CHECK_ENV} must be 1 or 0, got {', '.join(bad)}")
    on = [r for r, value in enumerate(settings) if value in _ON]
    if 0 < len(on) < len(settings):
        off = [r for r in range(len(settings)) if r not in on]
        raise RuntimeError(f"{_CHECK_ENV} differs across ranks: on for ranks {on}, off for ranks "
                           f"{off}; set it the same way for the whole job")
    return bool(on)


def destroy_process_group(group=None):
    """Free `group`'s communicators, or, with no argument, every group and the default one.
    Like MPI_Comm_free it is collective: every member of the group must call it."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return
    default = _get_default_group("destroy_process_group")
    if group is None or group is default:
        watchdog.stop()
        for pg in reversed(_live_groups):
            pg._free()
        _live_groups.clear()
        GroupMember.WORLD = None
        _local.update(rank=None, size=None)
        return
    _live(group, "destroy_process_group")
    _live_groups.remove(group)
    group._free()


def new_group(ranks=None, timeout=None):
    """A group of the given global ranks (all ranks when None), backed by an MPI
    sub-communicator. Every rank of the default group must call it, members or not, with the
    same ranks; non-members get `GroupMember.NON_GROUP_MEMBER`. As in torch, the ranks are
    sorted: group rank i is the i-th smallest global rank. `timeout` defaults to the default
    group's."""
    world = _get_default_group("new_group")
    with checks.collective(world, "new_group") as check:
        members = _validated_ranks(ranks, world.size())
        seconds = world.timeout if timeout is None else _seconds(timeout)
        check.value("ranks", zlib.crc32(np.asarray(members, np.int64).tobytes()),
                    lambda crc: f"a list with checksum {crc:#010x}")
        check.value("len(ranks)", len(members))
    mpi_group = world.comm.Get_group()
    subset = mpi_group.Incl(members)
    comm = duplicate(world.comm, "new_group", lambda: world.comm.Create(subset))
    subset.Free()
    mpi_group.Free()
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    pg = ProcessGroup(comm, members, world.check_collectives, seconds,
                      f"the group of global ranks {members}")
    _live_groups.append(pg)
    return pg


def _seconds(timeout):
    if not isinstance(timeout, datetime.timedelta) or timeout.total_seconds() <= 0:
        raise TypeError(f"timeout must be a positive datetime.timedelta, got {timeout!r}")
    return timeout.total_seconds()


def _validated_ranks(ranks, world_size):
    if ranks is None:
        return list(range(world_size))
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise TypeError(f"ranks must be a list of global ranks, got {type(ranks).__name__}")
    ranks = list(ranks)
    for r in ranks:
        if not isinstance(r, numbers.Integral) or isinstance(r, bool) or not 0 <= r < world_size:
            raise ValueError(f"ranks must be global ranks in [0, {world_size}), got {r!r} "
                             f"in {ranks}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks must not repeat a rank, got {ranks}")
    if not ranks:
        raise ValueError("ranks must name at least one rank")
    return sorted(int(r) for r in ranks)


def _get_default_group(caller="this function"):
    if GroupMember.WORLD is None:
        raise RuntimeError(f"{caller}() needs the default process group: call "
                           f"mpigrad.distributed.init_process_group() first")
    return GroupMember.WORLD


def _live(group, caller):
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"{caller}(): group must be a ProcessGroup from new_group() or None for "
                        f"the default group, got {group!r}")
    if group.comm is None:
        raise ValueError(f"{caller}(): {group.name} was destroyed")
    return group


def member_group(group, caller):
    """The ProcessGroup a call should run on, or None when this rank is not in `group` (as in
    torch, the call then does nothing on this rank and warns)."""
    if group is None:
        return _get_default_group(caller)
    if group is GroupMember.NON_GROUP_MEMBER:
        warnings.warn(f"{caller}() on global rank {get_rank()}, which is not a member of the "
                      f"group passed; nothing was done on this rank", stacklevel=3)
        return None
    _get_default_group(caller)
    return _live(group, caller)


def get_rank(group=None):
    """This process's rank in `group` (the default group when None); -1 if not a member."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return (_get_default_group("get_rank") if group is None else _live(group, "get_rank")).rank()


def get_world_size(group=None):
    """The number of ranks in `group` (the default group when None); -1 if not a member."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    pg = _get_default_group("get_world_size") if group is None else _live(group, "get_world_size")
    return pg.size()


def get_local_rank():
    """This process's rank among the processes on its node (those sharing memory with it)."""
    _get_default_group("get_local_rank")
    return _local["rank"]


def get_local_world_size():
    """How many processes of the default group run on this node."""
    _get_default_group("get_local_world_size")
    return _local["size"]


def get_backend(group=None):
    """Always "mpi"; here so torch scripts that ask keep working."""
    member_group(group, "get_backend")
    return "mpi"


def get_process_group_ranks(group):
    """The global ranks of `group`'s members, in group-rank order."""
    return list(_live(group, "get_process_group_ranks").ranks)


def get_global_rank(group, group_rank):
    """The global rank of `group`'s rank `group_rank`."""
    pg = _live(group, "get_global_rank")
    if not isinstance(group_rank, numbers.Integral) or not 0 <= group_rank < pg.size():
        raise ValueError(f"group_rank must be in [0, {pg.size()}) for {pg.name}, "
                         f"got {group_rank!r}")
    return pg.ranks[group_rank]


def get_group_rank(group, global_rank):
    """`global_rank`'s rank within `group`."""
    return group_rank_of(_live(group, "get_group_rank"), global_rank, "global_rank")


def group_rank_of(pg, global_rank, name):
    """Translate a global rank argument (`src`, `dst`, ...) into a rank of `pg`, or say why not."""
    world_size = _get_default_group().size()
    if not isinstance(global_rank, numbers.Integral) or isinstance(global_rank, bool):
        raise TypeError(f"{name} must be an int global rank, got {global_rank!r}")
    if not 0 <= global_rank < world_size:
        raise ValueError(f"{name}={global_rank} is out of range: global ranks are "
                         f"0..{world_size - 1}")
    try:
        return pg.ranks.index(global_rank)
    except ValueError:
        raise ValueError(f"{name}={global_rank} is not a member of {pg.name}") from None
