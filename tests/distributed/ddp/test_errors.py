"""Unused parameters and mismatched models: clear errors on every rank, never a hang.

Without the end-of-backward agreement, a parameter that gets no gradient leaves its bucket
unlaunched and the ranks wait for each other forever; without the construction check,
mismatched models broadcast garbage or hang. The in-process tests are bounded by the
watchdog in conftest; `test_scenarios_finish_under_timeout` (serial run) also runs the same
situations in a 2-rank job of their own under a hard timeout (one job for all of them, each
reporting its own outcome).
"""
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
from mpigrad import nn
from mpigrad.distributed.algorithms import Join
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

from tests.faults._processes import kill, start_waiting_job, survivors

from .._environment import job_environment
from .._helpers import finish_together
from ._models import MLP, mse, params_of, regression_data

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_EXIT = 124  # what coreutils' `timeout` exits with when it had to stop the job


def step(model, rank, seed=0):
    x, y = regression_data(4, seed=seed * 10 + rank)
    loss = mse(model(mg.tensor(x)), mg.tensor(y))
    loss.backward()
    return loss


@pytest.mark.mpi(min_size=2)
def test_parameter_unused_on_all_ranks_is_an_error_naming_it(rank):
    model = DDP(MLP(seed=0, extra=True), bucket_cap_mb=0)
    model.module.use_extra = False
    with pytest.raises(RuntimeError) as info:
        step(model, rank)
    message = str(info.value)
    assert "'extra'" in message and "all ranks" in message
    assert "find_unused_parameters=True" in message
    # The error leaves the model usable: next iteration with every parameter used works.
    model.module.use_extra = True
    model.zero_grad()
    step(model, rank)
    grads = MPI.COMM_WORLD.allgather(model.module.extra.grad._array.copy())
    assert all(np.array_equal(g, grads[0]) for g in grads)


@pytest.mark.mpi(min_size=2)
def test_a_sparse_embedding_is_refused_at_construction_naming_its_weight(rank):
    model = nn.Sequential(nn.Embedding(5, 3, sparse=True), nn.Linear(3, 1))
    with pytest.raises(NotImplementedError, match="parameter '0.weight' gets sparse gradients"):
        DDP(model)
    # Every rank refused alone, before any collective: the group still works.
    assert MPI.COMM_WORLD.allreduce(1) == MPI.COMM_WORLD.Get_size()
    model[0].sparse = False
    step_model = DDP(model)
    step_model(mg.tensor([1, 2])).sum().backward()
    grads = MPI.COMM_WORLD.allgather(model[0].weight.grad._array.copy())
    assert all(np.array_equal(g, grads[0]) for g in grads)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_cap_mb", [0, 25])
@pytest.mark.parametrize("gradient_as_bucket_view", [False, True])
def test_an_exception_inside_backward_is_an_error_from_that_backward_on_every_rank(
        rank, size, bucket_cap_mb, gradient_as_bucket_view):
    """The last rank's backward raises once its first buckets are launched. That same
    backward settles the iteration with the others: every rank raises DDP's error from it
    (the faulty one's caused by its own exception), the iteration's gradients are dropped
    everywhere, a step changes nothing, the parameters stay equal, and the next iteration
    averages gradients as usual."""
    module = MLP(seed=0)
    module.register_buffer("seen", mg.zeros(1))  # broadcast at every forward
    model = DDP(module, bucket_cap_mb=bucket_cap_mb,
                gradient_as_bucket_view=gradient_as_bucket_view)
    faulty = size - 1

    def fail(grad):
        raise ValueError("injected")

    handle = model.module.w0.register_hook(fail) if rank == faulty else None  # w0 comes last
    with pytest.raises(RuntimeError) as info:
        step(model, rank)
    if handle is not None:
        handle.remove()
        assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value).startswith(
        f"DistributedDataParallel: the backward pass of iteration 0 did not finish on rank(s) "
        f"[{faulty}]")
    assert "Expected to have finished reduction in this iteration" in str(info.value)
    assert all(p.grad is None for p in model.parameters())
    SGD(model.parameters(), lr=0.1, momentum=0.9).step()  # a step without gradients: no-op
    everyone = MPI.COMM_WORLD.allgather(params_of(model))
    assert all(np.array_equal(a, b) for theirs in everyone for a, b in zip(theirs, everyone[0]))

    step(model, rank, seed=1)
    local = MLP(seed=0)
    x, y = regression_data(4, seed=10 + rank)  # step()'s batch for seed=1
    mse(local(mg.tensor(x)), mg.tensor(y)).backward()
    expected = [np.mean(grads, axis=0) for grads in
                zip(*MPI.COMM_WORLD.allgather([p.grad._array for p in local.parameters()]))]
    for param, average in zip(model.parameters(), expected):
        np.testing.assert_allclose(param.grad._array, average, rtol=1e-12, atol=1e-12)


@pytest.mark.mpi(min_size=2)
def test_an_exception_inside_backward_within_join_is_settled_and_join_finishes(rank, size):
    """The faulty rank's backward raises inside Join, and everyone catches and goes on; then
    that rank runs out of data first, so the others' last iteration is shadowed. The failed
    iteration is settled in its backward (no rank is left in Join's vote while another waits
    in DDP's agreement) and Join ends with equal parameters."""
    model = DDP(MLP(seed=0), bucket_cap_mb=0)
    optimizer = SGD(model.parameters(), lr=0.1)
    faulty = size - 1
    errors = []
    with Join([model]):
        for i in range(2 if rank == faulty else 3):
            handle = None
            if rank == faulty and i == 1:
                handle = model.module.w0.register_hook(lambda grad: 1 / 0)
            optimizer.zero_grad()
            try:
                step(model, rank, seed=i)
            except RuntimeError as err:
                errors.append((i, str(err).split(":")[1]))
            finally:
                if handle is not None:
                    handle.remove()
            optimizer.step()
    assert errors == [(1, " the backward pass of iteration 1 did not finish on rank(s) "
                          f"[{faulty}]")]
    everyone = MPI.COMM_WORLD.allgather(params_of(model))
    assert all(np.array_equal(a, b) for theirs in everyone for a, b in zip(theirs, everyone[0]))


@pytest.mark.mpi(min_size=2)
def test_a_shadow_iteration_refuses_to_run_over_an_unfinished_one(rank):
    """Resetting would zero-fill buckets whose reductions may still be in flight."""
    model = DDP(MLP(seed=0))  # buckets with storage of their own
    reducer = model.reducer
    reducer._finalize_queued = True  # a backward that started here and never finished
    reducer.buckets[0].buffer.fill(7)
    with pytest.raises(RuntimeError, match="last backward pass is unfinished"):
        reducer.shadow_iteration()
    assert (reducer.buckets[0].buffer == 7).all()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_cap_mb", [0, 25])
def test_parameter_unused_on_one_rank_is_an_error_on_every_rank(rank, bucket_cap_mb):
    model = DDP(MLP(seed=0, extra=True), bucket_cap_mb=bucket_cap_mb)
    model.module.use_extra = rank != 0
    with pytest.raises(RuntimeError) as info:
        step(model, rank)
    message = str(info.value)
    assert "'extra'" in message and "rank(s) [0]" in message
    for name in ("'w0'", "'b0'"):
        assert name not in message


@pytest.mark.mpi(min_size=2)
def test_find_unused_parameters_matches_oracle(rank, size):
    """`extra` is used on every rank but 0; `b2` is never used. Average over all ranks, with
    rank 0 contributing zero for `extra`; `b2`'s gradient stays None."""
    def build(seed):
        m = MLP(seed=seed, extra=True)
        m.unused = nn.Parameter(np.ones(4))
        return m

    model = DDP(build(rank), bucket_cap_mb=0, find_unused_parameters=True)
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref = build(0)
    ref_opt = SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for s in range(3):
        model.module.use_extra = rank != 0
        opt.zero_grad()
        step(model, rank, seed=s)
        opt.step()
        ref_opt.zero_grad()
        total = 0
        for r in range(size):
            ref.use_extra = r != 0
            x, y = regression_data(4, seed=s * 10 + r)
            total = total + mse(ref(mg.tensor(x)), mg.tensor(y))
        (total / size).backward()
        ref_opt.step()
    assert model.module.unused.grad is None
    for got, want in zip(params_of(model), params_of(ref)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


@pytest.mark.mpi(min_size=2)
def test_mismatched_shapes_raise_on_every_rank(rank):
    sizes = (5, 7, 6, 3) if rank != 1 else (5, 8, 6, 3)
    with pytest.raises(RuntimeError) as info:
        DDP(MLP(sizes=sizes))
    message = str(info.value)
    assert "parameter 0 ('w0')" in message
    assert "shape (8, 5)" in message and "rank(s) [1]" in message


@pytest.mark.mpi(min_size=2)
def test_mismatched_parameter_count_raises_on_every_rank(rank):
    with pytest.raises(RuntimeError) as info:
        DDP(MLP(extra=rank == 0))
    message = str(info.value)
    assert "'extra'" in message and "missing" in message


@pytest.mark.mpi(min_size=2)
def test_mismatched_dtype_raises_on_every_rank(rank):
    with pytest.raises(RuntimeError) as info:
        DDP(MLP(dtype=np.float32 if rank == 0 else np.float64))
    assert "dtype float32" in str(info.value) and "dtype float64" in str(info.value)


SCENARIOS = ["unused_one_rank", "unused_all_ranks", "mismatch", "join_uneven"]


@pytest.fixture(scope="module")
def scenarios_job():
    """One 2-rank job running every scenario in turn under a hard timeout: (returncode, the
    job's output), or None if even the outer timeout passed (a hang)."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    try:
        result = subprocess.run(["timeout", "-k", "10", "120", mpiexec, "-n", "2",
                                 sys.executable, os.path.join(HERE, "scenarios.py"),
                                 ",".join(SCENARIOS)],
                                capture_output=True, text=True, timeout=150,
                                env=job_environment())
    except subprocess.TimeoutExpired:
        return None
    return result.returncode, result.stdout + result.stderr


@pytest.mark.mpi_skip  # launches its own MPI jobs
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenarios_finish_under_timeout(scenario, scenarios_job):
    """Each scenario would hang (or pass silently) without its feature; here it must finish
    within the timeout with its check printed by every rank (the scenarios before it in the
    job must have, too)."""
    if scenarios_job is None:
        pytest.fail("the scenarios' job did not finish within 150 s (a hang)")
    returncode, output = scenarios_job
    assert returncode != TIMEOUT_EXIT, f"the scenarios' job hung: {output}"
    assert output.count(f"OK {scenario}") == 2, output
    assert returncode == 0, output


BACKGROUND_JOBS = ("jobs_losing_a_rank",)  # see tests/distributed/conftest.py


def _run_jobs_losing_a_rank():
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    scenarios = ["stop_mid_backward", "kill_mid_backward", "stop_while_summing"]
    # A marker on each job's command line finds its processes afterwards.
    markers = {scenario: f"mpigrad-test-{uuid.uuid4().hex}" for scenario in scenarios}
    jobs = {scenario: [start_waiting_job(["timeout", "-k", "10", "120", mpiexec, "-n", "3",
                                          sys.executable, os.path.join(HERE, "scenarios.py"),
                                          scenario, marker], env=job_environment(),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)]
            for scenario, marker in markers.items()}
    try:
        # Drained together: a job waited for after another could fill its pipes and stall.
        finished = {scenario: subprocess.CompletedProcess(jobs[scenario][0].args, code, out, err)
                    for scenario, [(code, out, err)] in
                    finish_together(jobs, timeout=150).items()}
    finally:
        leftovers = {}
        for scenario, marker in markers.items():
            # After a grace period: the launcher may return while the ranks it killed still
            # exit.
            leftovers[scenario] = survivors(marker)
            kill(leftovers[scenario])
    return {scenario: (finished[scenario], leftovers[scenario]) for scenario in scenarios}


@pytest.fixture(scope="module")
def jobs_losing_a_rank():
    """The 3-rank jobs whose last rank stops or dies, each under `timeout`, started side by
    side: most of each job is its other ranks waiting out the group's timeout, so they run in
    the background from the module's first test (BACKGROUND_JOBS). A future of {scenario:
    (the finished job, the pids of its processes still alive afterwards)}; those are killed
    when the jobs end, so a failure leaves nothing behind."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(_run_jobs_losing_a_rank)


@pytest.mark.mpi_skip  # launches its own MPI job
def test_rank_stopped_mid_backward_ends_the_job_through_the_watchdog(jobs_losing_a_rank):
    """The last of 3 ranks is stopped (SIGSTOP) in the middle of DDP's backward. The others
    wait for it in the end-of-backward agreement until the group's timeout (5 s), then the
    watchdog aborts the job naming the operation and the rank; nothing is left running."""
    result, leftovers = jobs_losing_a_rank.result()["stop_mid_backward"]
    output = result.stdout + result.stderr
    assert result.returncode not in (0, TIMEOUT_EXIT), output
    assert all(f"READY {rank}" in result.stdout for rank in range(3)), output
    # The first waiting rank to reach the timeout aborts the whole job, which may end the
    # other before it prints: at least one of them must have said where it waited.
    assert any(f"[rank {rank}] mpigrad.distributed: DistributedDataParallel: the "
               f"end-of-backward agreement on launched buckets on the default group has been "
               f"blocked on rank {rank} for longer than the group's timeout (5 s)" in output
               for rank in (0, 1)), output
    assert leftovers == [], f"processes left behind: {leftovers}"


@pytest.mark.mpi_skip  # launches its own MPI job
def test_rank_killed_mid_backward_ends_the_job(jobs_losing_a_rank):
    """The last of 3 ranks dies (SIGKILL) mid-backward: the job ends (the launcher notices the
    death, or else the watchdog after the group's timeout) and leaves nothing running."""
    result, leftovers = jobs_losing_a_rank.result()["kill_mid_backward"]
    output = result.stdout + result.stderr
    assert result.returncode not in (0, TIMEOUT_EXIT), output
    assert "backward finished without rank" not in output
    assert leftovers == [], f"processes left behind: {leftovers}"


@pytest.mark.mpi_skip  # launches its own MPI job
def test_rank_stopped_while_summing_shared_buckets_ends_the_job_through_the_watchdog(
        jobs_losing_a_rank):
    """The last of 3 ranks stops (SIGSTOP) after the end-of-backward agreement, about to sum
    its slice of a shared bucket: the others wait on its flags in shared memory, not in an
    MPI call, and the watchdog still aborts the job at the group's timeout (5 s), naming the
    reduction they wait for and the rank that does not answer; nothing is left running."""
    result, leftovers = jobs_losing_a_rank.result()["stop_while_summing"]
    output = result.stdout + result.stderr
    assert result.returncode not in (0, TIMEOUT_EXIT), output
    assert all(f"READY {rank}" in result.stdout for rank in range(3)), output
    assert any(f"[rank {rank}] mpigrad.distributed: DistributedDataParallel: waiting for the "
               f"reduction of bucket" in output and
               f"has been blocked on rank {rank} for longer than the group's timeout (5 s)"
               in output for rank in (0, 1)), output
    assert "rank 2: no answer (stopped" in output, output
    assert leftovers == [], f"processes left behind: {leftovers}"
