"""RRef: a reference to a value that lives on one worker (its owner), usable from any worker.

Reference counting follows PyTorch's RRef protocol, with the owner as the one place that
decides when the value dies:

- The owner keeps a table `_owned[rref_id] -> _Entry(value future, forks)`; `forks` are the
  ids of the user RRefs (on other workers) that may still reach the value, and of owner
  RRefs in messages the owner sent to itself, until they arrive. (`_local`, a weak map of
  every entry alive on this worker, finds the entries that were never forked.) The entry leaves
  the table when its last fork is deleted; the value is freed once no owner-side RRef object
  holds the entry either.
- Every user RRef is one fork with an id of its own. When it is garbage-collected it sends
  `delete(rref_id, fork_id)` to the owner, but only once the owner has confirmed the fork
  (until then the confirmation callback keeps the RRef alive), so a delete never overtakes
  the fork it deletes.
- Sending an RRef (in arguments or a return value) forks it:
  * owner -> user: the owner adds the new fork to its entry before the message leaves; the
    receiver's RRef is confirmed at once.
  * user A -> worker B: A keeps the RRef among its pending children until B says "child
    accepted". If B is the owner it says so at once. Otherwise B first sends `fork` to the
    owner, which adds the fork and acknowledges; then B's RRef is confirmed and B tells A.
    So at every moment some confirmed fork, or the owner's own reference, keeps the value.
- `remote()` creates a user RRef whose fork the owner registers before running the
  function; the reply confirms it. A fetch (`to_here`) that overtakes the `remote` finds
  the entry already made, value pending.

These bookkeeping messages are handled as soon as they are received, never wait, and are
acknowledged, so graceful shutdown waits for them like any other request. No step depends on
the order two messages are handled in: each is sent only after the reply it depends on.
"""
import itertools
import threading
import weakref

from ...futures import Future
from ..autograd import contexts
from ..autograd.engine import backward as distributed_backward
from . import agent as agents
from . import functions
from .agent import current_agent
from .calls import checked_call, describe_call, profiled, rpc_async, rpc_sync, seconds
from .constants import UNSET_RPC_TIMEOUT
from .wire import _RRefBase

_lock = threading.RLock()
_owned = {}             # rref_id -> _Entry, for values this worker owns that are forked
_local = weakref.WeakValueDictionary()  # rref_id -> _Entry, every entry alive here
_pending_children = {}  # fork_id -> the RRef that must stay alive until the child is accepted
_ids = itertools.count()


def _reset():
    with _lock:
        _owned.clear()
        _local.clear()
        _pending_children.clear()


def _new_id(agent):
    return (agent.rank, next(_ids))


class _Entry:
    __slots__ = ("future", "forks", "__weakref__")

    def __init__(self):
        self.future = Future()
        self.forks = set()


def _entry_for(rref_id):
    """The owner's entry for `rref_id`, created (with its value still pending) if a message
    about it arrives before the one that creates the value."""
    with _lock:
        entry = _owned.get(rref_id) or _local.get(rref_id)
        if entry is None:
            entry = _owned[rref_id] = _new_entry(rref_id)
        return entry


def _new_entry(rref_id):
    entry = _local[rref_id] = _Entry()
    return entry


class RRef(_RRefBase):
    """`RRef(value)` makes this worker the owner of `value`; RRefs from `remote()` or from
    messages may be owned elsewhere."""

    def __init__(self, value, type_hint=None):
        agent = current_agent("RRef")
        rref_id = _new_id(agent)
        with _lock:
            entry = _new_entry(rref_id)
        entry.future.set_result(value)
        self._init(agent.rank, rref_id, None, entry, True)

    def _init(self, owner, rref_id, fork_id, entry, confirmed):
        self._owner, self._id, self._fork_id = owner, rref_id, fork_id
        self._entry, self._confirmed = entry, confirmed
        self._created = None  # the reply to `remote()`, for RRefs it made

    @classmethod
    def _make(cls, owner, rref_id, fork_id, entry, confirmed):
        rref = object.__new__(cls)
        rref._init(owner, rref_id, fork_id, entry, confirmed)
        return rref

    # ---- what torch's RRef answers ---------------------------------------------------------

    def is_owner(self):
        return self._entry is not None

    def owner(self):
        return current_agent("RRef.owner").workers[self._owner]

    def owner_name(self):
        return self.owner().name

    def confirmed_by_owner(self):
        return self._confirmed or (self._created is not None and self._created.done())

    def local_value(self):
        """The value itself; only on the owner."""
        if self._entry is None:
            raise RuntimeError(f"local_value() called on a user RRef (owner: "
                               f"{self.owner_name()!r}); only the owner holds the value, use "
                               f"to_here() to fetch a copy")
        return self._entry.future.wait()

    def to_here(self, timeout=UNSET_RPC_TIMEOUT):
        """The value: the owner's own object on the owner, a copy fetched by RPC elsewhere."""
        if self._entry is not None:
            return self._entry.future.wait(None if timeout in (UNSET_RPC_TIMEOUT, 0)
                                           else timeout)
        agent = current_agent("RRef.to_here")
        value = agent.request(self._owner, "rref_fetch", self._id, "RRef.to_here()",
                              seconds(timeout), keep=self).wait()
        if self._created is not None:
            _quietly_wait(self._created)
        return value

    def _get_type(self, timeout=UNSET_RPC_TIMEOUT, blocking=True):
        """The type of the value, asked of the owner once and then remembered; with
        `blocking=False` a Future of it."""
        known = getattr(self, "_type", None)
        if known is None and self._entry is not None:
            known = self._type = type(self.local_value())
        if known is not None:
            return known if blocking else _done(known)
        future = rpc_async(self._owner, _value_type, args=(self,), timeout=timeout)

        def remember(done):
            self._type = done.wait()
            return self._type
        typed = future.then(remember)
        return typed.wait() if blocking else typed

    def backward(self, dist_autograd_ctx_id=-1, retain_graph=False):
        """Backward from the value (a scalar tensor), as torch's: with a distributed autograd
        context id, the distributed pass of that context, started on the owner; without one
        (-1), a local pass, which only the owner can run."""
        if dist_autograd_ctx_id == -1:
            if self._entry is None:
                raise RuntimeError(f"RRef.backward() without a dist_autograd_ctx_id runs a local "
                                   f"backward pass, which only the owner "
                                   f"({self.owner_name()!r}) can do; pass the context id for a "
                                   "distributed one")
            self.local_value().backward(retain_graph=retain_graph)
        elif self._entry is not None:
            _distributed_backward(self, dist_autograd_ctx_id, retain_graph)
        else:
            rpc_sync(self._owner, _distributed_backward,
                         args=(self, dist_autograd_ctx_id, retain_graph))

    def rpc_sync(self, timeout=UNSET_RPC_TIMEOUT):
        """`rref.rpc_sync().method(*args)` runs `value.method(*args)` on the owner."""
        return _Proxy(self, rpc_sync, timeout)

    def rpc_async(self, timeout=UNSET_RPC_TIMEOUT):
        return _Proxy(self, rpc_async, timeout)

    def remote(self, timeout=UNSET_RPC_TIMEOUT):
        return _Proxy(self, remote, timeout)

    def __repr__(self):
        if self._entry is not None:
            return f"OwnerRRef({self._id})"
        return f"UserRRef(RRefId = {self._id}, ForkId = {self._fork_id})"

    def __reduce__(self):
        raise RuntimeError("an RRef can only be sent in RPC arguments and return values, not "
                           "pickled on its own")

    def __del__(self):
        if not getattr(self, "_confirmed", False) or self._entry is not None:
            return  # owner-side, unconfirmed (kept alive until confirmed), or never built
        agent = agents.current
        if agent is not None:
            agent.post(self._owner, "rref_delete", (self._id, self._fork_id), "RRef delete")

    def _confirm(self, _future=None):
        self._confirmed = True


def _quietly_wait(future):
    """Wait for `remote()`'s reply; its error, if any, reached the caller through the fetch."""
    try:
        future.wait()
    except Exception:
        pass


class _Proxy:
    def __init__(self, rref, invoke, timeout):
        self._rref, self._invoke, self._timeout = rref, invoke, timeout

    def __getattr__(self, name):
        def call(*args, **kwargs):
            return self._invoke(self._rref._owner, _call_method,
                                args=(name, self._rref, args, kwargs), timeout=self._timeout)
        return call


def _call_method(name, rref, args, kwargs):
    return getattr(rref.local_value(), name)(*args, **kwargs)


def _distributed_backward(rref, context_id, retain_graph):
    distributed_backward(context_id, [rref.local_value()], retain_graph)


def _value_type(rref):
    return type(rref.local_value())


def _done(value):
    future = Future()
    future.set_result(value)
    return future


# ---- forking (runs while a message is encoded) and receiving ------------------------------

def fork(rref, dest, agent):
    """The description of `rref` that travels to `dest`."""
    if rref._entry is not None:
        # Even to itself (a call to its own worker), the owner registers a fork: it keeps the
        # value alive while the message travels, and the receiving side removes it.
        fork_id = _new_id(agent)
        with _lock:
            _owned.setdefault(rref._id, rref._entry).forks.add(fork_id)
        return (rref._owner, rref._id, fork_id, agent.rank)
    fork_id = _new_id(agent)
    with _lock:
        _pending_children[fork_id] = rref
    return (rref._owner, rref._id, fork_id, agent.rank)


def receive(described, agent):
    """The RRef a received description stands for (runs on the listener: never blocks)."""
    owner, rref_id, fork_id, parent = described
    if owner == agent.rank:
        rref = RRef._make(owner, rref_id, None, _entry_for(rref_id), True)
        if parent == agent.rank:
            _delete_fork(parent, (rref_id, fork_id))  # the transit fork of `fork` above
        else:
            agent.post(parent, "rref_child", fork_id, "RRef child accept")
        return rref
    if parent == owner:
        return RRef._make(owner, rref_id, fork_id, None, True)
    rref = RRef._make(owner, rref_id, fork_id, None, False)

    def confirmed(_future):
        rref._confirm()
        agent.post(parent, "rref_child", fork_id, "RRef child accept")

    agent.post(owner, "rref_fork", (rref_id, fork_id), "RRef fork", on_reply=confirmed)
    return rref


def _remote(agent, dest, func, args, kwargs, timeout, what):
    rref_id = _new_id(agent)
    if dest == agent.rank:
        with _lock:
            entry = _new_entry(rref_id)
        rref = RRef._make(dest, rref_id, None, entry, True)
        agent.pool.submit(_run_into, entry, func, args, kwargs, contexts.current_id())
        return rref
    fork_id = _new_id(agent)
    rref = RRef._make(dest, rref_id, fork_id, None, False)
    future = agent.request(dest, "rref_remote", (rref_id, fork_id, func, args, kwargs), what,
                           timeout)
    future.add_done_callback(rref._confirm)  # the callback keeps the RRef alive until then
    rref._created = future
    return rref


def remote(to, func, args=None, kwargs=None, timeout=UNSET_RPC_TIMEOUT):
    """Run `func` on worker `to`, which keeps the result; returns an RRef to it at once."""
    agent = current_agent("remote")
    dest = agent.worker(to).id
    func, args, kwargs = checked_call("remote", func, args, kwargs)
    rref = _remote(agent, dest, func, args, kwargs, seconds(timeout),
                        describe_call("remote", func))
    if rref._created is not None:  # created elsewhere: the row lasts until the owner confirms
        profiled("remote", agent, dest, func, rref._created)
    return rref


def _run_into(entry, func, args, kwargs, context):
    with contexts.running_in(context):
        try:
            _fill(entry, functions.call(func, args, kwargs))
        except Exception as exc:
            entry.future.set_exception(exc)


def _fill(entry, value):
    """The owner's value: `value`, or when an async function deferred it, its Future's."""
    if not isinstance(value, functions.Deferred):
        entry.future.set_result(value)
        return

    def settle(done):
        try:
            entry.future.set_result(done.wait())
        except Exception as exc:
            entry.future.set_exception(exc)
    value.future.add_done_callback(settle)


# ---- the owner's handlers ------------------------------------------------------------------

def _prepare_remote(sender, payload):
    rref_id, fork_id, func, args, kwargs = payload
    entry = _entry_for(rref_id)
    with _lock:
        entry.forks.add(fork_id)
    return entry, func, args, kwargs


def _run_remote(sender, prepared):
    entry, func, args, kwargs = prepared
    try:
        value = functions.call(func, args, kwargs)
    except Exception as exc:
        entry.future.set_exception(exc)
        raise
    _fill(entry, value)
    if isinstance(value, functions.Deferred):
        return value  # the creator hears back once the value exists (or failed)


def _fetch(sender, rref_id):
    # The entry may not exist yet: a fetch can be handled before the `remote` that creates
    # the value (messages are received by several threads).
    return _entry_for(rref_id).future.wait()


def _add_fork(sender, ids):
    rref_id, fork_id = ids
    entry = _entry_for(rref_id)
    with _lock:
        entry.forks.add(fork_id)


def _child_accepted(sender, fork_id):
    with _lock:
        _pending_children.pop(fork_id, None)


def _delete_fork(sender, ids):
    rref_id, fork_id = ids
    with _lock:
        entry = _owned.get(rref_id)
        if entry is None:
            return
        entry.forks.discard(fork_id)
        if not entry.forks:
            del _owned[rref_id]


def owned_count():
    """How many values this worker keeps alive for other workers (tests, leak checks)."""
    with _lock:
        return len(_owned)


def handlers(Handler):
    return {
        "rref_remote": Handler(_run_remote, prepare=_prepare_remote),
        "rref_fetch": Handler(_fetch),
        "rref_fork": Handler(_add_fork, inline=True),
        "rref_child": Handler(_child_accepted, inline=True),
        "rref_delete": Handler(_delete_fork, inline=True),
    }
