"""RRef: creation, the torch API, proxies, passing between workers, and reference counting
(the owner frees the value once no worker holds a reference)."""
import gc

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.rpc as rpc

from . import _remote

pytestmark = pytest.mark.mpi(min_size=2)


def _settle(*ranks):
    """Collect garbage here, then make sure every delete it sent has been handled: the
    owner acknowledges deletes in arrival order, and graceful shutdown waits for those
    acknowledgements; here a round trip behind them is enough."""
    gc.collect()
    agent = rpc.agent.current
    agent.wait_until_idle()
    for rank in ranks:
        rpc.rpc_sync(rank, gc.collect)


def test_get_type_asks_the_owner_once(workers):
    rank, _ = workers
    if rank != 0:
        return
    rref = rpc.remote("worker1", _remote.Counter, args=(5,))
    assert rref._get_type() is _remote.Counter
    assert rref._get_type(blocking=False).wait() is _remote.Counter
    local = rpc.RRef(mg.zeros(2))
    assert local._get_type() is mg.Tensor
    assert local._get_type(blocking=False).wait() is mg.Tensor


def test_remote_rref_api(workers):
    rank, _ = workers
    if rank != 0:
        return
    rref = rpc.remote("worker1", _remote.Counter, args=(5,))
    assert not rref.is_owner()
    assert rref.owner() == rpc.get_worker_info("worker1") and rref.owner_name() == "worker1"
    assert rref.to_here().value == 5
    assert rref.confirmed_by_owner()
    assert rref.rpc_sync().add(3) == 8
    assert rref.rpc_async().add(2).wait() == 10
    doubled = rref.remote().add(1)
    assert doubled.owner_name() == "worker1" and doubled.to_here() == 11
    with pytest.raises(RuntimeError, match="local_value.*user RRef.*to_here"):
        rref.local_value()
    assert rpc.rpc_sync(1, _remote.rref_owner_and_value, args=(rref,)) == ("worker1", 11, True)


def test_local_rref_and_rrefs_of_tensors(workers):
    rank, _ = workers
    if rank != 0:
        return
    t = mg.arange(6, dtype=mg.float64)
    local = rpc.RRef(t)
    assert local.is_owner() and local.confirmed_by_owner() and local.local_value() is t
    assert local.to_here() is t and local.owner_name() == "worker0"
    # The owner's own object comes back when the RRef returns to its owner.
    assert rpc.rpc_sync(1, _remote.identity, args=(local,)).local_value() is t
    assert rpc.rpc_sync(1, _remote.to_here_of, args=(local,))._array.tolist() == list(range(6))
    remote_tensor = rpc.remote(1, _remote.random_tensor, args=(3, (4,)))
    np.testing.assert_array_equal(remote_tensor.to_here()._array,
                                  np.random.default_rng(3).standard_normal(4))


def test_remote_error_is_raised_by_to_here(workers):
    rank, _ = workers
    if rank == 0:
        rref = rpc.remote(1, _remote.raise_value_error, args=("no value",))
        with pytest.raises(ValueError, match="no value"):
            rref.to_here()


def test_remote_to_self_is_owned_here(workers):
    rank, _ = workers
    rref = rpc.remote(rank, _remote.Counter, args=(rank,))
    assert rref.is_owner() and rref.local_value().value == rank
    # Sent to itself in a call, it is still the owner's own object.
    assert rpc.rpc_sync(rank, _remote.rref_owner_and_value, args=(rref,)) == \
        (f"worker{rank}", rank, True)
    assert rpc.rpc_sync(rank, _remote.identity, args=(rref,)).local_value() is rref.local_value()
    # An RRef made by a call to itself: the maker's object is gone by the time it arrives.
    made = rpc.rpc_sync(rank, _remote.wrap_in_rref, args=(_remote.Counter(3),))
    gc.collect()
    assert made.is_owner() and made.local_value().value == 3
    assert rpc.rpc_sync(rank, _remote.owned_count) == 0


def test_rref_returned_from_a_remote_call(workers):
    rank, _ = workers
    if rank == 0:
        rref = rpc.rpc_sync(1, _remote.wrap_in_rref, args=(_remote.Counter(9),))
        assert rref.owner_name() == "worker1" and rref.confirmed_by_owner()
        assert rref.to_here().value == 9
        del rref
        _settle(1)
        assert rpc.rpc_sync(1, _remote.owned_count) == 0


def test_owner_frees_the_value_after_the_last_user_drops_it(workers):
    rank, _ = workers
    if rank != 0:
        return
    rref = rpc.remote(1, _remote.make_tracked, args=("freed",))
    copy = rpc.rpc_sync(1, _remote.identity, args=(rref,))  # the owner's own RRef comes home
    assert copy.owner_name() == "worker1"
    rref.to_here()
    assert rpc.rpc_sync(1, _remote.is_alive, args=("freed",))
    assert rpc.rpc_sync(1, _remote.owned_count) == 1
    del copy
    _settle(1)
    assert rpc.rpc_sync(1, _remote.is_alive, args=("freed",)), "freed while still referenced"
    del rref
    _settle(1)
    assert rpc.rpc_sync(1, _remote.owned_count) == 0
    assert not rpc.rpc_sync(1, _remote.is_alive, args=("freed",))


@pytest.mark.mpi(min_size=3)
def test_user_to_user_fork_keeps_the_value_alive(workers):
    """worker0 holds a user RRef to a value on worker1 and passes it to worker2 (a fork
    between two users, confirmed by the owner); the value lives until both drop it."""
    rank, _ = workers
    if rank != 0:
        return
    rref = rpc.remote(1, _remote.make_tracked, args=("forked",))
    rref.rpc_sync().add(4)
    # worker2 keeps the fork in a remote RRef of its own (an RRef to an RRef's holder).
    holder = rpc.remote(2, _remote.identity, args=(rref,))
    assert rpc.rpc_sync(2, _remote.rref_owner_and_value, args=(rref,)) == ("worker1", 4, False)
    del rref
    _settle(1, 2)
    assert rpc.rpc_sync(1, _remote.is_alive, args=("forked",))
    assert holder.rpc_sync().to_here().value == 4
    del holder
    _settle(2, 1)
    _settle(1)
    assert rpc.rpc_sync(1, _remote.owned_count) == 0
    assert not rpc.rpc_sync(1, _remote.is_alive, args=("forked",))


def test_rref_cannot_be_pickled_outside_rpc(workers):
    import pickle
    with pytest.raises(RuntimeError, match="only be sent in RPC"):
        pickle.dumps(rpc.RRef(1))


def test_many_rrefs_leave_nothing_behind(workers):
    rank, size = workers
    rrefs = [rpc.remote((rank + k) % size, _remote.Counter, args=(k,)) for k in range(20)]
    assert [r.to_here().value for r in rrefs] == list(range(20))
    passed = [rpc.rpc_sync((rank + 1) % size, _remote.identity, args=(r,)) for r in rrefs[:5]]
    assert [p.owner_name() for p in passed] == [r.owner_name() for r in rrefs[:5]]
    del rrefs, passed
    _settle(*range(size))
    dist.barrier()  # every rank's deletes were handled before anyone counts
    _settle(*range(size))
    assert rpc.rpc_sync(rank, _remote.owned_count) == 0


def test_a_message_over_the_size_limit_forks_no_rref(workers, monkeypatch):
    """The size is checked while the message is encoded, before its RRefs are forked: an
    owner RRef left a fork in the owner's table, a user RRef a pending child, for a message
    that never left."""
    rank, _ = workers
    if rank == 0:
        from mpigrad.distributed.rpc import rref as rrefs
        owned, user = rpc.RRef(mg.ones(3)), rpc.remote(1, mg.ones, args=(3,))
        user.to_here()
        monkeypatch.setattr(rpc.wire, "MAX_MESSAGE_BYTES", 1000)
        big = np.zeros(200)  # 1600 bytes
        for ref in (owned, user):
            for to in (0, 1):
                with pytest.raises(ValueError, match="would carry 1600 bytes"):
                    rpc.rpc_sync(to, _remote.identity, args=(ref, big))
        assert rrefs.owned_count() == 0 and not rrefs._pending_children
        # A function whose reply is too big: the callee's error comes back instead.
        with pytest.raises(ValueError, match="would carry 1600 bytes"):
            rpc.rpc_sync(0, np.zeros, args=(200,))
        monkeypatch.undo()
        assert rpc.rpc_sync(1, _remote.identity, args=(owned,)).to_here().tolist() == [1, 1, 1]
        del user, ref
        _settle(1)
        assert rpc.rpc_sync(1, _remote.owned_count) == 0
