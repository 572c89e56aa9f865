"""Distributed autograd against the same model in one process (float64, to 1e-10): a model
split across workers, with a nested call, a remote weight used twice and a returned tensor
the loss never uses; gradients land in the context, never in .grad; contexts end
everywhere; errors in a remote backward reach the caller; concurrent contexts stay apart."""
import threading
import time

import numpy as np
import pytest

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.autograd as dist_autograd
import mpigrad.distributed.rpc as rpc

from . import _remote
from .conftest import bounded

pytestmark = pytest.mark.mpi(min_size=2)
TOL = dict(rtol=1e-10, atol=1e-10)


def _input(seed=0):
    return mg.tensor(np.random.default_rng(seed).standard_normal((5, 4)), requires_grad=True)


def _oracle(x_array):
    """Loss and gradients of the same model in this one process."""
    local = {name: mg.tensor(a.copy(), requires_grad=True)
             for name, a in _remote.state["arrays"].items()}
    x = mg.tensor(x_array.copy(), requires_grad=True)

    def stage1(h):
        t = mg.tanh(h @ local["W1"])
        return mg.sigmoid(t @ local["W2"]) + t.sum(), t * 3.0

    loss = _remote.split_loss(x, local["W0"], lambda: local["W1"], stage1)
    loss.backward()
    return loss.item(), x.grad._array, {name: p.grad._array for name, p in local.items()}


def _remote_grad(name, context_id):
    owner = _remote.state["owners"][name]
    return rpc.rpc_sync(owner, _remote.grad_of, args=(name, context_id))


def test_split_model_matches_one_process(model):
    rank, size = model
    if rank != 0:
        return
    x = _input()
    expected_loss, expected_x, expected = _oracle(x._array)
    with bounded(60), dist_autograd.context() as context_id:
        loss = _remote.distributed_split_loss(x)
        dist_autograd.backward(context_id, [loss])
        np.testing.assert_allclose(loss.item(), expected_loss, **TOL)
        grads = dist_autograd.get_gradients(context_id)
        np.testing.assert_allclose(grads[x]._array, expected_x, **TOL)
        for name in ("W0", "W1", "W2"):
            np.testing.assert_allclose(_remote_grad(name, context_id)._array, expected[name], **TOL)
        # Gradients live in the context only.
        assert x.grad is None and _remote.param("W0").grad is None
        assert rpc.rpc_sync(1, _remote.grad_attribute, args=("W1",)) is None
        assert rpc.rpc_sync(_remote.state["owners"]["W2"], _remote.grad_attribute,
                            args=("W2",)) is None


def test_backward_twice_with_retain_graph_accumulates_in_the_context(model):
    rank, _ = model
    if rank != 0:
        return
    x = _input(1)
    _, expected_x, expected = _oracle(x._array)
    with bounded(60), dist_autograd.context() as context_id:
        loss = _remote.distributed_split_loss(x)
        dist_autograd.backward(context_id, [loss], retain_graph=True)
        dist_autograd.backward(context_id, [loss])
        np.testing.assert_allclose(dist_autograd.get_gradients(context_id)[x]._array,
                                   2 * expected_x, **TOL)
        np.testing.assert_allclose(_remote_grad("W2", context_id)._array, 2 * expected["W2"],
                                   **TOL)


def test_contexts_end_on_every_worker(model):
    rank, size = model
    if rank == 0:
        for i in range(200):
            with dist_autograd.context() as context_id:
                loss = _remote.distributed_split_loss(_input(i))
                if i % 2:
                    dist_autograd.backward(context_id, [loss])
        for r in range(size):
            assert rpc.rpc_sync(r, _remote.context_count) == 0, f"worker{r} kept contexts"
        with pytest.raises(RuntimeError, match="no distributed autograd context"):
            dist_autograd.get_gradients(context_id)


def test_an_error_in_a_remote_backward_reaches_the_caller(model):
    rank, _ = model
    if rank != 0:
        return
    with bounded(60), dist_autograd.context() as context_id:
        h = _input() @ _remote.param("W0")
        out = rpc.rpc_sync(1, _remote.explode_stage, args=(h,))
        with pytest.raises(RuntimeError, match="(?s)worker 'worker1'.*backward exploded"):
            dist_autograd.backward(context_id, [out.sum()])
    assert rpc.rpc_sync(1, _remote.context_count) == 0


def test_a_failed_pass_leaves_no_gradient_behind(model):
    """worker1's pass raises before its send function for the first call takes its
    gradients: the pass still waits for them, and forgets them, before it answers (they
    are not acknowledged one by one), so none is left for a later pass of the context."""
    rank, _ = model
    if rank != 0:
        return
    with bounded(60), dist_autograd.context() as context_id:
        h = _input() @ _remote.param("W0")
        kept = rpc.rpc_sync(1, _remote.add, args=(h, h))
        out = rpc.rpc_sync(1, _remote.explode_stage, args=(h,))
        for _ in range(3):
            with pytest.raises(RuntimeError, match="(?s)worker 'worker1'.*backward exploded"):
                dist_autograd.backward(context_id, [out.sum() + kept.sum()],
                                       retain_graph=True)
            for r in (0, 1):
                assert rpc.rpc_sync(r, _remote.gradients_waiting, args=(context_id,)) == 0


def test_a_pass_after_a_timed_out_one_takes_only_its_own_gradients(process_group,
                                                                    monkeypatch):
    """worker1's gradients for a pass that timed out on worker0 arrive after it gave up;
    the retried pass of the context took them as its own (the mailbox had no rounds)."""
    from mpigrad.distributed.autograd import engine
    rpc.init_rpc(f"worker{dist.get_rank()}",
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(rpc_timeout=1,
                                                                     init_method="env://"))
    try:
        if dist.get_rank() == 0:
            released = []
            drain = engine.drain

            def drain_then_release(context, round_):
                """worker1's held pass (its gradients times 2) ends only once this pass
                has given up on them; later passes there scale by 5."""
                try:
                    drain(context, round_)
                finally:
                    if not released:
                        released.append(rpc.rpc_async(1, _remote.release_backward,
                                                      args=(5.0,), timeout=20))
            monkeypatch.setattr(engine, "drain", drain_then_release)
            # The calls' own timeouts are generous: only the pass's wait for gradients may
            # run into the agent's 1 s (a call under it timed out once on a loaded machine).
            rpc.rpc_sync(1, _remote.hold_backward, args=(2.0,), timeout=20)
            x = mg.tensor(np.ones(3), requires_grad=True)
            with bounded(30), dist_autograd.context() as context_id:
                y = rpc.rpc_sync(1, _remote.held_stage, args=(x,), timeout=20)
                with pytest.raises(rpc.RpcTimeoutError, match="no gradients"):
                    dist_autograd.backward(context_id, [y.sum()], retain_graph=True)
                released[0].wait()
                dist_autograd.backward(context_id, [y.sum()])
                np.testing.assert_allclose(dist_autograd.get_gradients(context_id)[x]._array,
                                           np.full(3, 5.0), **TOL)
                assert rpc.rpc_sync(0, _remote.gradients_waiting, args=(context_id,),
                                    timeout=20) == 0
    finally:
        rpc.shutdown()


def test_backward_arguments_are_checked(model):
    rank, _ = model
    with dist_autograd.context() as context_id:
        with pytest.raises(ValueError, match="scalar"):
            dist_autograd.backward(context_id, [mg.ones(3, requires_grad=True) * 2])
        with pytest.raises(RuntimeError, match="does not require grad"):
            dist_autograd.backward(context_id, [mg.tensor(1.0)])
        with pytest.raises(RuntimeError, match="do not nest"):
            with dist_autograd.context():
                pass
    with pytest.raises(RuntimeError, match="no distributed autograd context 12345"):
        dist_autograd.backward(12345, [mg.tensor(1.0, requires_grad=True)])


def test_concurrent_contexts_stay_apart(model):
    """Two threads, each with its own context and input, run forward and backward through
    the same workers at the same time; each gets its own one-process gradients."""
    rank, _ = model
    if rank != 0:
        return
    results, errors = {}, []

    def train(seed):
        try:
            x = _input(seed)
            with dist_autograd.context() as context_id:
                for _ in range(5):
                    loss = _remote.distributed_split_loss(x)
                    dist_autograd.backward(context_id, [loss])
                results[seed] = (x._array.copy(), dist_autograd.get_gradients(context_id)[x]._array,
                                 _remote_grad("W1", context_id)._array)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    with bounded(120):
        threads = [threading.Thread(target=train, args=(seed,)) for seed in (11, 12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for seed, (x_array, x_grad, w1_grad) in results.items():
        _, expected_x, expected = _oracle(x_array)
        np.testing.assert_allclose(x_grad, 5 * expected_x, **TOL)
        np.testing.assert_allclose(w1_grad, 5 * expected["W1"], **TOL)


def test_rref_backward_equals_dist_autograd_backward(model):
    rank, _ = model
    if rank != 0:
        return
    x = _input(3)
    with bounded(60):
        with dist_autograd.context() as context_id:
            loss = rpc.rpc_sync("worker1", _remote.squared_sum, args=(x,))
            dist_autograd.backward(context_id, [loss])
            expected = dist_autograd.get_gradients(context_id)[x]._array.copy()
        with dist_autograd.context() as context_id:
            rref = rpc.remote("worker1", _remote.squared_sum, args=(x,))
            rref.backward(context_id)
            np.testing.assert_allclose(dist_autograd.get_gradients(context_id)[x]._array,
                                       expected, **TOL)
        np.testing.assert_allclose(expected, 2 * x._array, **TOL)
        with pytest.raises(RuntimeError, match="only the owner"):
            rref.backward()
        # On the owner, without a context: the local pass, into .grad.
        local = rpc.RRef(_remote.squared_sum(x))
        local.backward()
        np.testing.assert_allclose(x.grad._array, 2 * x._array, **TOL)


@pytest.mark.mpi(min_size=3)
def test_a_worker_fenced_still_forwards_passes_and_releases(workers):
    """worker1 forwards worker0's backward pass and context release to worker2 while its own
    requests wait for a fence (a context it left, in torch terms). Its forwards waited for
    that fence too: two workers each releasing a context the other forwards waited for each
    other forever."""
    rank, _ = workers
    if rank != 0:
        return
    x = mg.tensor(np.ones(3), requires_grad=True)
    with bounded(10):
        with dist_autograd.context() as context_id:
            y = rpc.rpc_sync(1, _remote.call_back, args=(2, _remote.scaled, (x, 2.0)))
            rpc.rpc_sync(1, _remote.fence_for, args=(30.0,))
            dist_autograd.backward(context_id, [y.sum()])
            np.testing.assert_allclose(dist_autograd.get_gradients(context_id)[x]._array,
                                       np.full(3, 2.0), **TOL)
        # Waits for the release, which went through worker1 to worker2.
        assert rpc.rpc_sync(2, _remote.context_count) == 0
    rpc.rpc_sync(1, _remote.open_fence)


def test_a_fence_wait_is_bounded_by_the_calls_timeout(workers):
    """worker1's requests wait for a fence that does not end: its call with a timeout fails
    within that timeout (it waited for the fence with no bound)."""
    rank, _ = workers
    if rank != 0:
        return
    rpc.rpc_sync(1, _remote.fence_for, args=(30.0,))
    try:
        with bounded(10):
            start = time.monotonic()
            outcome = rpc.rpc_sync(1, _remote.call_within, args=(0, 0.5))
            assert outcome.startswith("RpcTimeoutError") and "rpc_sync(" in outcome
            assert time.monotonic() - start < 5
    finally:
        rpc.rpc_sync(1, _remote.open_fence)
    assert rpc.rpc_sync(1, _remote.call_within, args=(0, 0.5)) == "worker0"


def test_a_failed_release_is_reported(workers, capfd):
    rank, _ = workers
    if rank != 0:
        return
    rpc.rpc_sync(1, _remote.break_releases, args=(True,))
    try:
        with bounded(20):
            with dist_autograd.context() as context_id:
                rpc.rpc_sync(1, _remote.whoami)
            rpc.rpc_sync(1, _remote.whoami)  # waits for the release
    finally:
        rpc.rpc_sync(1, _remote.break_releases, args=(False,))
    err = capfd.readouterr().err
    assert f"releasing context {context_id} failed" in err and "release refused" in err
    assert "worker 'worker1'" in err


def test_a_release_times_out_with_the_agents_timeout(process_group, capfd):
    """A release had no timeout: one that never ends was waited for forever."""
    rpc.init_rpc(f"worker{dist.get_rank()}",
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(rpc_timeout=0.5,
                                                                     init_method="env://"))
    try:
        if dist.get_rank() == 0:
            # The calls' own timeouts are generous, so that only the release (whose answer
            # comes once releases are repaired) runs into the agent's 0.5 s, however loaded
            # the machine.
            rpc.rpc_sync(1, _remote.break_releases, args=(True, True), timeout=20)
            with bounded(20):
                with dist_autograd.context() as context_id:
                    rpc.rpc_sync(1, _remote.whoami, timeout=20)
                err = ""
                while f"releasing context {context_id} failed" not in err:
                    time.sleep(0.05)
                    err += capfd.readouterr().err
                assert "timed out" in err
            rpc.rpc_sync(1, _remote.break_releases, args=(False,), timeout=20)
    finally:
        rpc.shutdown()


def test_a_failed_answer_leaves_no_other_sender_waiting(workers, monkeypatch):
    """A pass answers every recv function it did not run even when answering one fails (its
    sender is gone), and raises its own error first: the first failure stopped the answers,
    leaving later senders waiting, and replaced the pass's error."""
    from mpigrad.distributed.autograd import contexts, engine
    from mpigrad.distributed.autograd.functions import RecvBackward
    context = contexts.DistAutogradContext(12345)
    context.round = 1
    recvs = [RecvBackward(context, 1, send_id, [((3,), "<f8")]) for send_id in range(3)]
    answered = []

    def send_gradients(node, grads, error):
        if node is recvs[0]:
            raise rpc.WorkerUnavailableError("sender gone")
        node.answered = context.round
        answered.append((node.send_id, error))
    monkeypatch.setattr(engine, "send_gradients", send_gradients)
    failed = engine._answer_the_rest(context, recvs, "boom")
    assert isinstance(failed, rpc.WorkerUnavailableError)
    assert answered == [(1, "boom"), (2, "boom")]

    def run_backward(*args):
        raise ArithmeticError("the pass's own error")
    monkeypatch.setattr(engine, "run_backward", run_backward)
    for node in recvs:
        node.answered = 0
    context.recvs = recvs
    with pytest.raises(ArithmeticError, match="own error"):
        engine._run_pass(context, [], [], False)
