"""Process groups: the default group over MPI.COMM_WORLD (or a given communicator), and
sub-groups backed by MPI sub-communicators. Rank arguments everywhere are ranks of the
default group ("global" ranks), as in torch.distributed.
"""
import collections
import datetime
import itertools
import numbers
import os
import re
import warnings
import weakref
import zlib

import numpy as np
from mpi4py import MPI

from ..device import device
from ..launchers import LOCAL_RANK_VARIABLES
from .fault import abort, checks, segments, watchdog
from .launch import rendezvous

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

    Code built on the group (DDP, ZeRO, the comm hooks) registers the communicators it makes
    from it as `Communicators`, which the group frees when it is destroyed. `serial` names the
    group the same way on every rank (groups are made collectively over the whole world).
    """

    def __init__(self, comm, ranks, check_collectives, timeout, name, serial):
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
        self.serial = serial
        # The backend the script named (torch's get_backend answers it); MPI carries them all.
        self.backend = "mpi"
        # Communicators of code built on this group, by key: every set not yet freed, those
        # its owner let go of waiting in `_released` for a point where all members agree.
        self._owned = {}
        self._released = {}
        self._owned_count = 0

    def rank(self):
        return self.comm.Get_rank()

    def size(self):
        return self.comm.Get_size()

    def __repr__(self):
        return f"<ProcessGroup: {self.name}, rank {self.rank()} of {self.size()}>"

    def _renew(self, parent):
        """Move this group to new communicators made from `parent` (a communicator over a
        superset of its ranks that carries no other traffic; collective over the members).
        The test plugin does this after a failed test: requests its ranks left unmatched on
        the old communicators stay there, where MPI completes or drops them, and cannot
        match the next test's. Code built on the group (DDP's Channel) keeps its own."""
        members = self.comm.Get_group()
        fresh = duplicate(parent, f"renewing {self.name}", lambda: parent.Create_group(members))
        members.Free()
        for comm in (self._autograd_comm, self._internal_comm, self.comm):
            comm.Free()  # legal with requests pending: MPI frees it once they are gone
        fresh.Set_errhandler(MPI.ERRORS_RETURN)
        self.comm = fresh
        self._internal_comm = duplicate(fresh, f"renewing {self.name}")
        self._autograd_comm = duplicate(fresh, f"renewing {self.name}")
        self._collective_count = 0

    def _free(self):
        # Every member frees every set it owns here, live or released, in one order.
        for key in sorted(self._owned):
            self._owned[key].free()
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
            f"wrappers (del model; once every rank has dropped one, its communicators are "
            f"freed at the next wrapper, new_group or destroy_process_group)."
        ) from err


class Communicators:
    """The communicators an object built on `group` (DDP's channel, a hierarchy, ZeRO) made
    from it, collectively, in the same order on every member: the list `comms`, which may
    grow (a hook's round communicators) and may hold MPI.COMM_NULL (a Split that left this
    rank out).

    MPI_Comm_free is collective in effect (some MPIs synchronise in it, and the next
    communicator's creation needs every member to agree on what is free), so communicators
    are freed only where every member frees the same ones in the same order: `free()`, at a
    point every member reaches (closing the object explicitly, destroying the group), or
    `release()` from the owner's finalizer, which only queues them. A collected owner's
    finalizer runs whenever the cycle collector gets to it, at a different moment on each
    rank; the queued sets are freed at the group's next agreement (`free_released`), once
    every member has released them."""

    def __init__(self, group, comms):
        self.group = group
        self.comms = comms
        # The same on every member: sets are registered in the same order on all of them.
        self.key = (group.serial, group._owned_count)
        group._owned_count += 1
        group._owned[self.key] = self

    def release(self):
        """Queue them for the group's next agreement. For the owner's finalizer, which runs on
        any thread at any moment (inside this module's own code too): no MPI, no lock, only
        an append, which is atomic."""
        _released.append(self)

    def free(self):
        """Free them now; every member of the group must do the same at the same point."""
        self.group._owned.pop(self.key, None)
        self.group._released.pop(self.key, None)
        if not MPI.Is_finalized():
            for comm in self.comms:
                if comm != MPI.COMM_NULL:
                    comm.Free()
        self.comms.clear()


# Sets released by their owners' finalizers, not yet sorted into their groups' `_released`.
_released = collections.deque()


def free_released(group):
    """The agreement, collective over `group`: free the communicators that every member of
    the group that made them has released (see `Communicators`), here on each, in one order.
    Sets made on groups inside `group` count too. DDP and ZeRO construction and `new_group`
    call it, so dropped owners' communicators never pile up (`destroy_process_group` frees
    its group's sets, released or not)."""
    while _released:
        owned = _released.popleft()
        if owned.key in owned.group._owned:  # else freed already, with its group
            owned.group._released[owned.key] = owned
    mine = set(group.ranks)
    candidates = {key: owned for pg in _live_groups if mine.issuperset(pg.ranks)
                  for key, owned in pg._released.items()}
    # A few small tuples, at points that are collective and rare already (construction).
    with watchdog.blocked(group, "agreeing which released communicators to free"):
        everyone = group._internal_comm.allgather(
            [(key, len(owned.group.ranks)) for key, owned in candidates.items()])
    reports = collections.Counter(key for released in everyone for key, _ in released)
    members = {key: size for released in everyone for key, size in released}
    for key in sorted(key for key in candidates if reports[key] == members[key]):
        candidates[key].free()


class DuplicatedCommunicators:
    """Base of the objects that talk on duplicates of a group's communicator of their own, so
    their messages never match the user's (DDP's Channel, FSDP's ShardComm): `count`
    duplicates made collectively at construction, under the watchdog as `owner: ...`, and
    held as the group's `Communicators`, so that the holder's collection only releases them.
    Once the group is destroyed they are gone, and using them is an error that says `again`."""

    def __init__(self, process_group, owner, again, count=2):
        self.process_group = process_group
        self._owner, self._again = owner, again
        comms = []
        with self.blocked("duplicating the group's communicator"):  # Dup is collective
            free_released(process_group)  # earlier holders' ones, dropped on every rank
            try:
                for _ in range(count):
                    comms.append(duplicate(process_group.comm, owner))
            except BaseException:
                for comm in comms:
                    comm.Free()
                raise
        communicators = Communicators(process_group, comms)
        self._comms = communicators.comms  # emptied when the group is destroyed
        weakref.finalize(self, communicators.release)

    @property
    def control(self):
        """The second duplicate: the holder's small blocking messages."""
        return self._open()[1]

    def _open(self):
        if not self._comms:
            raise RuntimeError(f"{self._owner}: its process group was destroyed "
                               f"(destroy_process_group); {self._again}, in a live group")
        return self._comms

    def blocked(self, what):
        """A watch (see watchdog) for a blocking wait of the holder's on this group."""
        return watchdog.blocked(self.process_group, f"{self._owner}: {what}")


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
_group_serials = itertools.count()
_local = {"rank": None, "size": None}


def is_available():
    return True


def is_initialized():
    return GroupMember.WORLD is not None


class Backend(str):
    """torch.distributed.Backend's names. Every one runs over MPI here (see `backend_name`)."""
    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    UCC = "ucc"
    MPI = "mpi"
    XCCL = "xccl"

    def __new__(cls, name):
        return str.__new__(cls, backend_name(name))


# The backends torch scripts name. On a CPU they would mean gloo or MPI; here MPI carries them
# all, with the same collectives and semantics, so the name changes nothing but is noted once.
_KNOWN_BACKENDS = ("mpi", "gloo", "nccl", "ucc", "xccl")
_noted_backends = set()


def backend_name(backend):
    """`backend` lower-cased and checked: a torch backend name, or a device map such as
    "cpu:gloo,cuda:nccl". Raises ValueError, as torch does, for anything else."""
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a string such as 'mpi' or 'gloo', got {backend!r}")
    name = backend.lower()
    names = [part.partition(":")[2] if ":" in part else part for part in name.split(",")]
    if not all(n in _KNOWN_BACKENDS for n in names):
        raise ValueError(f"Invalid backend: '{backend}' (expected one of "
                         f"{', '.join(_KNOWN_BACKENDS)}, or a device map such as "
                         "'cpu:gloo,cuda:nccl'; every one runs over MPI in mpigrad)")
    return name


def _note_backend(name):
    if name != "mpi" and name not in _noted_backends:
        _noted_backends.add(name)
        warnings.warn(f"backend {name!r}: mpigrad runs every backend over MPI (the same "
                      "collectives and results; mpigrad has no GPU, so no NCCL)", stacklevel=3)


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None, *,
                       comm=None, abort_on_exception=None):
    """Start the default process group, with torch's signature.

    The world is MPI's: `comm` (MPI.COMM_WORLD when None), formed by whatever launched the
    processes: mpiexec/mpirun, Slurm's `srun --mpi=pmi2`, torchrun, whose processes
    `rendezvous` joins into one MPI world when mpigrad.distributed is imported, or processes
    started separately (`python` N times, mpigrad.multiprocessing, a plain `python` being a
    world of size 1), which join here (see `init_method`).

    - `backend`: "mpi", "gloo", "nccl", "ucc" or a device map ("cpu:gloo,cuda:nccl"), any case;
      all run over MPI, which a one-time warning notes for names other than "mpi".
    - `init_method`: "env://" (the default), "tcp://host:port" or "file:///path", as torch
      reads them. Under an MPI launcher, MPI already decided where the processes meet, so they
      are checked against MPI's world (see `rank`).
    - `world_size`, `rank`: with backend "mpi" ignored with torch's warning (MPI assigns them);
      otherwise they must agree with MPI's world, or ValueError names both. A world of one
      process when several were asked for (WORLD_SIZE, `world_size`) is the same error, with
      how to launch: never a silent world of one.
    - In a process that no MPI launcher started, MPI starts here: `init_method` (env:// when
      None: MASTER_ADDR, MASTER_PORT, and RANK/WORLD_SIZE unless given) and `rank`/`world_size`
      say where the processes meet, and they form one MPI world of `world_size` ranks (see
      `rendezvous.start_mpi`), or every one of them raises, saying why, within `timeout` (or
      MPIGRAD_RENDEZVOUS_TIMEOUT when None, 120 seconds by default).
    - `timeout` (a timedelta, 30 minutes when None): a rank blocked this long in one collective
      or message aborts the job, saying what it was waiting for (see `watchdog`).
    - `store` is refused (there is no key-value store to use); `group_name` and `pg_options`
      are accepted and unused; `device_id` must be a CPU device or None.
    - `abort_on_exception`: an uncaught exception on any rank aborts the whole job instead of
      leaving the other ranks waiting (see `abort`). None reads MPIGRAD_ABORT_ON_EXCEPTION,
      which is on unless set to 0; `set_abort_on_exception` changes it later.
    """
    if isinstance(backend, MPI.Comm):  # mpigrad's earlier spelling, init_process_group(comm)
        backend, comm = None, backend
    if is_initialized():
        raise ValueError("trying to initialize the default process group twice! (call "
                         "destroy_process_group() first to start a new default group)")
    name = "mpi" if backend is None else backend_name(backend)
    if store is not None:
        raise ValueError("store= is not supported: mpigrad's processes meet through MPI; leave "
                         "it out (init_method, RANK/WORLD_SIZE or mpiexec place the processes)")
    if device_id is not None and device(device_id).type != "cpu":
        raise ValueError(f"device_id={device_id!r}: mpigrad runs on the CPU only")
    # Where no launcher started MPI: join the world init_method describes, then start it.
    rendezvous.start_mpi(init_method, rank, world_size,
                         None if timeout is None else _seconds(timeout))
    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py intracommunicator such as MPI.COMM_WORLD, "
                        f"got {comm!r}")
    if init_method is not None and rendezvous.mpi_launcher() is None:
        # Where the processes were to meet: its mistakes are errors, as in torch. Under an MPI
        # launcher MPI placed them and the URL has nothing to add.
        rendezvous.request_from_init_method(init_method, rank, world_size)
    if backend is not None and name == "mpi" and (world_size != -1 or rank != -1):
        warnings.warn(f"For MPI backend, world_size ({world_size}) and rank ({rank}) are ignored "
                      "since they are assigned by the MPI runtime.", stacklevel=2)
        rank = world_size = -1
    if comm == MPI.COMM_WORLD:
        rendezvous.check_world(comm.Get_rank(), comm.Get_size(), rank, world_size)
    _note_backend(name)
    seconds = _seconds(DEFAULT_TIMEOUT if timeout is None else timeout)
    abort_setting = abort.setting(abort_on_exception)
    check = _agreed_check_setting(comm)
    world = ProcessGroup(duplicate(comm, "init_process_group"), range(comm.Get_size()), check,
                         seconds, "the default group", next(_group_serials))
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    _local.update(rank=node.Get_rank(), size=node.Get_size())
    node.Free()
    # Every rank is past MPI_Init (the collectives above completed), so every local rank has
    # mapped MPI's shared memory: its name can go, and an aborted job leaves nothing behind.
    segments.release()
    world.backend = name
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
        _released.clear()  # every set in it was freed with its group
        GroupMember.WORLD = None
        _local.update(rank=None, size=None)
        return
    _live(group, "destroy_process_group")
    _live_groups.remove(group)
    group._free()


def new_group(ranks=None, timeout=None, backend=None):
    """A group of the given global ranks (all ranks when None), backed by an MPI
    sub-communicator. Every rank of the default group must call it, members or not, with the
    same ranks; non-members get `GroupMember.NON_GROUP_MEMBER`. As in torch, the ranks are
    sorted: group rank i is the i-th smallest global rank. `timeout` and `backend` (what
    `get_backend` answers for the group; MPI carries it) default to the default group's."""
    world = _get_default_group("new_group")
    free_released(world)
    backend = world.backend if backend is None else backend_name(backend)
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
    serial = next(_group_serials)  # taken on every rank, members or not, to stay in step
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    pg = ProcessGroup(comm, members, world.check_collectives, seconds,
                      f"the group of global ranks {members}", serial)
    pg.backend = backend
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
        # torch's exception type and words, and which call needed the group.
        raise ValueError("Default process group has not been initialized, please make sure to "
                         f"call init_process_group. ({caller}() needs it: call "
                         "mpigrad.distributed.init_process_group() first)")
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


def get_node_local_rank(fallback_rank=None):
    """This process's rank on its node, as torch reads it: LOCAL_RANK (torchrun sets it), then,
    where torch would need `fallback_rank`, what the MPI launcher or the default group knows
    (MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK, the ranks sharing memory), then
    `fallback_rank`; RuntimeError if none of them is there."""
    for name in LOCAL_RANK_VARIABLES:
        if name in os.environ:
            return int(os.environ[name])
    if is_initialized():
        return _local["rank"]
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment. Consider passing fallback_rank to "
                       "allow `get_node_local_rank` to work, assuming you are not running in a "
                       "multi-device context and want the code to run locally instead.")


def get_default_backend_for_device(target):
    """"mpi" for the CPU, the only device mpigrad has (torch would say "gloo"; mpigrad runs every
    backend over MPI). ValueError for other devices, as torch's for one without a backend."""
    resolved = target if isinstance(target, device) else device(target)
    if resolved.type != "cpu":
        raise ValueError(f"Default backend not registered for device : {target} (mpigrad runs "
                         "on the CPU only)")
    return "mpi"


def get_local_world_size():
    """How many processes of the default group run on this node."""
    _get_default_group("get_local_world_size")
    return _local["size"]


def get_backend(group=None):
    """The backend the script named for `group` ("gloo", "nccl", "mpi", ...; "mpi" when it
    named none), as torch answers; MPI carries every one of them here."""
    pg = member_group(group, "get_backend")
    if pg is None:
        raise ValueError("Invalid process group specified")
    return pg.backend


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
