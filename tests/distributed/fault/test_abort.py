"""An uncaught exception on one rank ends the whole MPI job instead of leaving the others
waiting, and so does a rank blocked for longer than its group's timeout. The jobs run as
subprocesses, under `timeout`, so a regression fails instead of hanging."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mpigrad.distributed as dist
from mpigrad.distributed.fault import abort

from .._environment import launcher_free_environment

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


def _run(launcher, script_text, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(script_text)
    return subprocess.run(["timeout", "120", *launcher, sys.executable, str(script)],
                          capture_output=True, text=True)


@pytest.mark.mpi_skip
def test_a_rank_that_raises_aborts_the_job(tmp_path):
    result = _run([MPIEXEC, "-n", "2"], RAISE_ON_LAST_RANK, tmp_path)
    assert result.returncode not in (0, TIMEOUT_EXIT), result.stderr
    assert "[rank 1] uncaught exception on rank 1 of 2; aborting the MPI job" in result.stderr
    assert "[rank 1] RuntimeError: raised on purpose" in result.stderr


@pytest.mark.mpi_skip
def test_single_process_keeps_pythons_behaviour(tmp_path):
    result = _run([], RAISE_ON_LAST_RANK, tmp_path)
    assert result.returncode == 1
    assert "aborting" not in result.stderr
    assert result.stderr.rstrip().endswith("RuntimeError: raised on purpose")


@pytest.mark.mpi_skip
def test_collectives_that_cannot_meet_end_the_job_after_the_timeout(tmp_path):
    result = _run([MPIEXEC, "-n", "2"], COLLECTIVES_ON_DIFFERENT_GROUPS, tmp_path)
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
def test_an_aborted_job_leaves_no_shared_memory_segment(tmp_path, how):
    """MPICH unlinks its /dev/shm segment in MPI_Finalize only: each aborted job used to leave
    2 MB of memory there for good. The job names the segments its ranks map; none may be left
    once it has ended (other jobs running meanwhile do not matter)."""
    script = tmp_path / "job.py"
    script.write_text(SEGMENTS_THEN_DIE)
    result = subprocess.run(["timeout", "120", MPIEXEC, "-n", "2", sys.executable, str(script),
                             how], capture_output=True, text=True)
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


@pytest.mark.mpi_skip  # a fresh interpreter: the session's group is already initialised
@pytest.mark.parametrize("arguments,env,expected", [
    ({}, {}, "abort"),
    ({"abort_on_exception": False}, {}, "python's"),
    ({}, {abort.ENV: "0"}, "python's"),
    ({"abort_on_exception": True}, {abort.ENV: "0"}, "abort"),
], ids=["default", "argument-off", "env-off", "argument-wins"])
def test_importing_installs_nothing_init_decides(arguments, env, expected, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(WHICH_HOOK.replace("ARGUMENTS", repr(arguments)))
    result = subprocess.run(["timeout", "120", sys.executable, str(script)], capture_output=True,
                            text=True, env=launcher_free_environment(**env))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["import: python's", f"init: {expected}"]


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
