"""Fault injection: each scenario of scenarios.py runs as an MPI job on 2 and 3 ranks.

Every fault must end in a clear message or a clean finish, within 10 s of the fault (the
group's timeout there is 4 s, stall reports come after 1 s), never in a hang (each job runs
under `timeout`), and leave no process behind. The checkpoint faults (every truncation and
bit flip of a file, kill -9 during saves) are in tests/serialization/test_serialization.py and
tests/jobs/test_train_job.py.
"""
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.distributed._environment import job_environment
from tests.faults._processes import kill, survivors

SCENARIOS = Path(__file__).with_name("scenarios.py")
MPIEXEC = shutil.which("mpiexec")
HANG = 124  # timeout's exit status: the job hung
WITHIN_SECONDS = 10

pytestmark = [pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)"),
              pytest.mark.parametrize("ranks", [2, 3])]


def run(scenario, ranks):
    """Run `scenario`; returns (exit status, output, seconds from the fault to the end)."""
    marker = f"mpigrad-fault-{uuid.uuid4().hex}"  # finds this job's processes afterwards
    try:
        result = subprocess.run(["timeout", "-k", "10", "120", MPIEXEC, "-n", str(ranks),
                                 sys.executable, str(SCENARIOS), scenario, marker],
                                capture_output=True, text=True,
                                env=job_environment(MPIGRAD_STALL_SECONDS=1))
        ended = time.time()
    finally:
        leftovers = survivors(marker)
        kill(leftovers)
    output = result.stdout + result.stderr
    assert result.returncode != HANG, f"{scenario} hung:\n{output}"
    assert leftovers == [], f"{scenario} left processes behind: {leftovers}\n{output}"
    fault = re.search(r"^FAULT ([0-9.]+)", result.stdout, re.MULTILINE)
    assert fault, output
    return result.returncode, output, ended - float(fault.group(1))


def test_exception_inside_backward_caught_then_step_keeps_every_rank_in_line(ranks):
    status, output, seconds = run("exception_in_backward_caught", ranks)
    assert status == 0, output
    for r in range(ranks):
        assert (f"[rank {r}] step 2: RuntimeError: DistributedDataParallel: the backward pass "
                f"of iteration 2 did not finish on rank(s) [1]") in output, output
        assert output.count(f"[rank {r}] step ") == 1, output  # that step only, everywhere
        assert f"[rank {r}] parameters agree: True" in output, output
        assert f"[rank {r}] END exception_in_backward_caught" in output, output
    assert seconds < WITHIN_SECONDS


@pytest.mark.parametrize("scenario, raised", [
    ("exception_in_backward", "ValueError: injected fault in backward"),
    ("exception_outside_backward", "ValueError: injected fault between steps")])
def test_an_uncaught_exception_on_one_rank_aborts_the_job(ranks, scenario, raised):
    status, output, seconds = run(scenario, ranks)
    assert status != 0
    assert f"[rank 1] uncaught exception on rank 1 of {ranks}; aborting the MPI job" in output
    assert f"[rank 1] {raised}" in output
    assert seconds < WITHIN_SECONDS


def test_mismatched_collectives_are_an_error_on_every_rank(ranks):
    status, output, seconds = run("mismatched_collectives", ranks)
    assert status != 0
    expected = ("all_reduce on ranks 0, 2; broadcast on rank 1" if ranks == 3
                else "all_reduce on rank 0; broadcast on rank 1")
    assert f"collective: {expected}" in output, output
    assert seconds < WITHIN_SECONDS


def test_a_killed_rank_ends_the_job(ranks):
    status, output, seconds = run("sigkill", ranks)
    assert status != 0
    assert "KILLED" in output.upper() or "signal 9" in output, output
    assert seconds < WITHIN_SECONDS


@pytest.mark.parametrize("scenario, waiting_in", [
    ("sys_exit", "the check before all_reduce #2"),
    ("return_from_main", "DistributedDataParallel: the end-of-backward agreement on launched "
                         "buckets #3")])
def test_a_rank_that_leaves_early_ends_the_job_naming_it(ranks, scenario, waiting_in):
    status, output, seconds = run(scenario, ranks)
    assert status != 0
    # The first rank to abort ends the job, maybe before the others have printed.
    assert re.search(r"\[rank [02]\] mpigrad.distributed: rank 1 has left the job \(its "
                     r"interpreter exited: sys.exit\(\) or the end of its script\) while this "
                     rf"rank waits in {re.escape(waiting_in)} on the default group", output), output
    assert re.search(r"\[rank [02]\]   rank 1: left the job", output), output
    assert seconds < WITHIN_SECONDS


def test_point_to_point_messages_go_on_after_an_uninvolved_rank_left(ranks):
    if ranks == 2:
        pytest.skip("on 2 ranks every pair involves the rank that leaves")
    status, output, seconds = run("messages_after_one_left", ranks)
    assert status == 0, output
    assert "has left the job" not in output
    assert all(f"[rank {r}] END messages_after_one_left" in output for r in range(ranks))


def test_a_receive_from_a_rank_that_left_ends_the_job_naming_it(ranks):
    status, output, seconds = run("recv_from_one_that_left", ranks)
    assert status != 0
    # The departure, not the timeout, ends the job (the timeout would name no departure).
    assert re.search(r"\[rank [02]\] mpigrad.distributed: rank 1 has left the job .* while this "
                     r"rank waits in recv from rank 1 \(tag 0\) on the default group", output), \
        output
    assert "longer than the group's timeout" not in output, output
    assert seconds < WITHIN_SECONDS


def test_a_script_that_finalizes_mpi_itself_ends_cleanly(ranks):
    status, output, seconds = run("finalize_by_the_script", ranks)
    assert status == 0, output
    for r in range(ranks):
        assert f"[rank {r}] watchdog out of MPI: True" in output, output
        assert f"[rank {r}] END finalize_by_the_script" in output, output


def test_uneven_data_without_join_reports_where_each_rank_waits(ranks):
    status, output, seconds = run("uneven_data_without_join", ranks)
    assert status != 0
    ddp = "waiting in DistributedDataParallel: the end-of-backward agreement on launched buckets"
    assert re.search(rf"\[rank 0\]   rank 0: {ddp}", output), output
    assert re.search(r"\[rank 0\]   rank 1: waiting in the check before all_reduce #1 .*"
                     r"in uneven_data_without_join  <- has not reached it", output), output
    assert re.search(r"has been blocked on rank \d for longer than the group's timeout \(4 s\)",
                     output), output
    assert seconds < WITHIN_SECONDS


@pytest.mark.parametrize("scenario, stalled_in, straggler_at", [
    ("stall_in_collective", "the check before all_reduce #1", "in stall_in_collective"),
    ("stall_in_ddp_constructor",
     "DistributedDataParallel: duplicating the group's communicator #1",
     "in stall_in_ddp_constructor"),
    ("stall_in_backward",
     "DistributedDataParallel: the end-of-backward agreement on launched buckets #1",
     "in <lambda>")])
def test_a_stall_is_reported_then_aborted_at_the_timeout(ranks, scenario, stalled_in,
                                                          straggler_at):
    status, output, seconds = run(scenario, ranks)
    assert status != 0
    report = (f"[rank 0] mpigrad.distributed stall: {stalled_in} on the default group has "
              f"waited 1 s (MPIGRAD_STALL_SECONDS)")
    assert output.count(report) == 1, output  # once, by the lowest waiting rank
    assert re.search(rf"\[rank 0\]   rank 1: not in any collective: at .*{straggler_at}"
                     r".*  <- has not reached it", output), output
    call = stalled_in.rsplit(" ", 1)[0]
    assert re.search(rf"\[rank (\d)\] mpigrad.distributed: {re.escape(call)} on the default "
                     rf"group has been blocked on rank \1 for longer than the group's timeout "
                     rf"\(4 s\)", output), output
    assert seconds < WITHIN_SECONDS
