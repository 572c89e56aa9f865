"""An uncaught exception on one rank ends the whole MPI job instead of leaving the others
waiting, and so does a rank blocked for longer than its group's timeout. The jobs run as
subprocesses, under `timeout`, so a regression fails instead of hanging; those of the tests
selected start side by side with the module (BACKGROUND_JOBS), since each is mostly an
interpreter starting and ranks waiting for an abort."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import mpigrad.distributed as dist
from mpigrad.distributed.fault import abort

from tests.faults._processes import start_waiting_job

from .._environment import job_environment, launcher_free_environment
from .._helpers import finish_together

RAISE_ON_LAST_RANK = """
import numpy as np
import mpigrad.distributed as dist

dist.init_process_group()
last = dist.get_world_size() - 1
if dist.get_rank() == last:
    raise RuntimeError("raised on purpose")
dist.recv(np.zeros(1), src=last)  # never satisfied: the other ranks would wait forever
"""
COLLECTIVES_ON_DIFFERENT_GROUPS = """
import datetime
import numpy as np
import mpigrad.distributed as dist

dist.init_process_group(timeout=datetime.timedelta(seconds=1))
pair = dist.new_group([0, 1])
# Rank 0 reduces over the pair, rank 1 over the default group: neither call can complete.
dist.all_reduce(np.zeros(1), group=pair if dist.get_rank() == 0 else None)
"""
TIMEOUT_EXIT = 124  # what coreutils' `timeout` exits with when it had to stop the job
MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))
TWO_RANKS = [MPIEXEC, "-n", "2"]


@pytest.mark.mpi_skip
def test_a_rank_that_raises_aborts_the_job(result):
    assert result.returncode not in (0, TIMEOUT_EXIT), result.stderr
    assert "[rank 1] uncaught exception on rank 1 of 2; aborting the MPI job" in result.stderr
    assert "[rank 1] RuntimeError: raised on purpose" in result.stderr


@pytest.mark.mpi_skip
def test_single_process_keeps_pythons_behaviour(result):
    assert result.returncode == 1
    assert "aborting" not in result.stderr
    assert result.stderr.rstrip().endswith("RuntimeError: raised on purpose")


@pytest.mark.mpi_skip
def test_collectives_that_cannot_meet_end_the_job_after_the_timeout(result):
    assert result.returncode not in (0, TIMEOUT_EXIT), result.stderr
    assert ("the check before all_reduce on the group of global ranks [0, 1] has been blocked "
            "on rank 0 for longer than the group's timeout (1 s)") in result.stderr
    # The stack shows where the rank was stuck.
    assert 'job.py", line 9' in result.stderr


SEGMENTS_THEN_DIE = """
import os, signal, sys
import numpy as np
import mpigrad.distributed as dist

dist.init_process_group()
dist.all_reduce(np.ones(100000))  # the shared-memory path is in use
with open("/proc/self/maps") as maps:  # the segments this rank maps, named even once unlinked
    names = {line.split(maxsplit=5)[5].split()[0] for line in maps
             if len(line.split(maxsplit=5)) == 6 and "/dev/shm/" in line}
print("segments:", *sorted(names), flush=True)
dist.barrier()
if dist.get_rank() == dist.get_world_size() - 1:
    if sys.argv[1] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("raised on purpose")
dist.recv(np.zeros(1), src=dist.get_world_size() - 1)
"""


@pytest.mark.mpi_skip
@pytest.mark.parametrize("how", ["exception", "sigkill"])
def test_an_aborted_job_leaves_no_shared_memory_segment(result, how):
    """MPICH unlinks its /dev/shm segment in MPI_Finalize only: each aborted job used to leave
    2 MB of memory there for good. The job names the segments its ranks map; none may be left
    once it has ended (other jobs running meanwhile do not matter)."""
    assert result.returncode not in (0, TIMEOUT_EXIT), result.stderr
    named = {name for line in result.stdout.splitlines() if line.startswith("segments:")
             for name in line.split()[1:]}
    mpi_segments = {n for n in named if os.path.basename(n).startswith("mpich_shm_")}
    assert mpi_segments, result.stdout  # MPICH's shared memory was really in use
    assert not [n for n in named if os.path.exists(n)], named


def test_hook_installed_by_init_process_group():
    assert sys.excepthook is abort._abort_hook


WHICH_HOOK = """
import sys
import mpigrad.distributed as dist
from mpigrad.distributed.fault import abort

print("import:", "abort" if sys.excepthook is abort._abort_hook else "python's")
dist.init_process_group(**ARGUMENTS)
print("init:", "abort" if sys.excepthook is abort._abort_hook else "python's")
"""


# id: (init_process_group's arguments, environment, the hook init leaves)
HOOK_CASES = {"default": ({}, {}, "abort"),
              "argument-off": ({"abort_on_exception": False}, {}, "python's"),
              "env-off": ({}, {abort.ENV: "0"}, "python's"),
              "argument-wins": ({"abort_on_exception": True}, {abort.ENV: "0"}, "abort")}


@pytest.mark.mpi_skip  # a fresh interpreter: the session's group is already initialised
@pytest.mark.parametrize("expected", [expected for _, _, expected in HOOK_CASES.values()],
                         ids=list(HOOK_CASES))
def test_importing_installs_nothing_init_decides(result, expected):
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["import: python's", f"init: {expected}"]


# The job of each test that runs one, by the test's name: (launcher, script, its arguments,
# environment). Each script is job.py in a directory of its own: a test reads the name in a
# traceback.
JOBS = {
    "test_a_rank_that_raises_aborts_the_job":
        (TWO_RANKS, RAISE_ON_LAST_RANK, [], job_environment()),
    "test_single_process_keeps_pythons_behaviour":
        ([], RAISE_ON_LAST_RANK, [], launcher_free_environment()),
    "test_collectives_that_cannot_meet_end_the_job_after_the_timeout":
        (TWO_RANKS, COLLECTIVES_ON_DIFFERENT_GROUPS, [], job_environment()),
    **{f"test_an_aborted_job_leaves_no_shared_memory_segment[{how}]":
       (TWO_RANKS, SEGMENTS_THEN_DIE, [how], job_environment())
       for how in ("exception", "sigkill")},
    **{f"test_importing_installs_nothing_init_decides[{name}]":
       ([], WHICH_HOOK.replace("ARGUMENTS", repr(arguments)), [],
        launcher_free_environment(**env))
       for name, (arguments, env, _) in HOOK_CASES.items()},
}
BACKGROUND_JOBS = ("launched",)  # see tests/distributed/conftest.py


@pytest.fixture(scope="module")
def launched(request, tmp_path_factory):
    """The jobs of the module's selected tests, started together: a future of {test name:
    [(exit status, stdout, stderr)]} (finish_together's)."""
    selected = [item.name for item in request.session.items
                if item.module is request.module and item.name in JOBS]
    processes = {}
    for name in selected:
        launcher, text, arguments, env = JOBS[name]
        script = tmp_path_factory.mktemp("job") / "job.py"
        script.write_text(text)
        start = start_waiting_job if launcher else subprocess.Popen  # MPI jobs wait
        processes[name] = [start(
            ["timeout", "120", *launcher, sys.executable, str(script), *arguments],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(finish_together, processes, 150)


@pytest.fixture
def result(request, launched):
    """This test's job, once it has ended."""
    [(returncode, stdout, stderr)] = launched.result()[request.node.name]
    return subprocess.CompletedProcess(request.node.name, returncode, stdout, stderr)


def test_bad_setting_is_an_error(monkeypatch):
    monkeypatch.setenv(abort.ENV, "maybe")
    with pytest.raises(ValueError, match="MPIGRAD_ABORT_ON_EXCEPTION must be 1 or 0"):
        abort.setting(None)


@pytest.mark.mpi(min_size=2)
def test_turned_off_it_hands_over_to_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(abort, "_previous_hook", lambda *exc_info: seen.append(exc_info[1]))
    dist.set_abort_on_exception(False)
    try:
        error = ValueError("not fatal")
        abort._abort_hook(ValueError, error, None)
    finally:
        dist.set_abort_on_exception(True)
    assert seen == [error]
