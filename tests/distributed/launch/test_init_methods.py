"""init_process_group(init_method='tcp://...' | 'file://...', rank=r, world_size=n) in n
separately started python processes (no mpiexec, no torchrun): one MPI world of n ranks, as in
torch, or an error on every process within the timeout; never n worlds of one.

The serial tests start their own processes (tutorial/init_methods.py, the tutorial's
"Initialization Methods", and the same file on PyTorch for its output); the others run on every
rank of the MPI steps."""
import pathlib
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpigrad.distributed.launch import rendezvous

from .._environment import launcher_free_environment
from .._helpers import finish, finish_together
from ._ports import free_port

HERE = pathlib.Path(__file__).parent
SCRIPT = HERE.parent / "tutorial" / "init_methods.py"


def test_env_init_method_takes_rank_and_world_size_from_the_arguments():
    # torch's env:// reads MASTER_ADDR and MASTER_PORT; rank and world_size, when given,
    # stand for RANK and WORLD_SIZE.
    request = rendezvous.request_from_init_method("env://", 1, 3, {"MASTER_ADDR": "node0",
                                                                  "MASTER_PORT": "29500"})
    assert (request.rank, request.world_size, request.host, request.port) == (1, 3, "node0",
                                                                               29500)
    with pytest.raises(ValueError, match="WORLD_SIZE=3 is set but MASTER_ADDR, MASTER_PORT "
                                         "are not"):
        rendezvous.request_from_init_method("env://", 1, 3, {})


def test_start_mpi_does_nothing_once_mpi_runs(process_group):
    # Under mpiexec, or after the session's init_process_group: MPI's world stands, and no
    # rendezvous is attempted (nobody listens on port 9; a join would fail or wait).
    start = time.monotonic()
    rendezvous.start_mpi("tcp://127.0.0.1:9", 0, 7, timeout=30)
    assert time.monotonic() - start < 1


def _start(args_per_process, env, cwd=None):
    return [subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for args in args_per_process]


def _url(method, tmp_path, name):
    return f"tcp://127.0.0.1:{free_port()}" if method == "tcp" else f"file://{tmp_path / name}"


def _printed(results):
    return sorted(" ".join(line.split()) for _, out, _ in results for line in out.splitlines())


SIZES = [2, 3]
# PyTorch's worlds of each size in SIZES, one after the other, their ranks forked from one
# process that imported torch: started separately, each rank would import it again (2 s of
# CPU each). Each rank still runs the whole script, as a process of its own, with its own
# arguments; its output is written at once, so that the ranks' lines, which share one pipe,
# do not interleave.
FORKED_WORLDS = """
import contextlib, io, os, runpy, sys, traceback
import torch
script, worlds = sys.argv[1], sys.argv[2:]
for url, size in zip(worlds[::2], map(int, worlds[1::2])):
    ranks = []
    for rank in range(size):
        pid = os.fork()
        if pid == 0:
            sys.argv, code, printed = [script, url, str(rank), str(size)], 0, io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    runpy.run_path(script, run_name="__main__")
            except BaseException:
                traceback.print_exc()
                code = 1
            os.write(1, printed.getvalue().encode())
            os._exit(code)
        ranks.append(pid)
    if any(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in ranks):
        sys.exit(f"a rank of the world of {size} failed")
"""


@pytest.fixture(scope="module")
def torch_printed(tmp_path_factory):
    """{size: what PyTorch's processes print}, over tcp://: the lines depend on the size only,
    so they answer for both methods."""
    directory = tmp_path_factory.mktemp("torch")
    script = directory / "init_methods_torch.py"
    script.write_text(re.sub(r"^.*# torch: (.*)$", r"\1", SCRIPT.read_text(), flags=re.M))
    worlds = [argument for size in SIZES for argument in (_url("tcp", directory, ""), str(size))]
    [(code, out, err)] = finish(_start([["-c", FORKED_WORLDS, str(script), *worlds]],
                                       launcher_free_environment(), cwd=directory), timeout=300)
    assert code == 0, err
    lines = _printed([(code, out, err)])
    return {size: [line for line in lines if f" of {size} " in line] for size in SIZES}


@pytest.mark.mpi_skip
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("method", ["tcp", "file"])
def test_separately_started_processes_form_one_world_as_in_torch(method, size, tmp_path,
                                                                  request):
    url = _url(method, tmp_path, "ours")
    results = finish(_start([[str(SCRIPT), url, str(rank), str(size)] for rank in range(size)],
                             launcher_free_environment()), timeout=120)
    for code, _, err in results:
        assert code == 0, err
    total = size * (size + 1) // 2
    assert _printed(results) == [f"Rank {rank} of {size} has data tensor({total}.)"
                                 for rank in range(size)]
    pytest.importorskip("torch")
    assert _printed(results) == request.getfixturevalue("torch_printed")[size]


@pytest.mark.mpi_skip
def test_the_same_file_serves_one_job_after_another(tmp_path):
    # The tutorial's fixed path, used by two jobs in turn: rank 0 removes the file once every
    # rank has read it, so the second job cannot read the first one's address.
    url = f"file://{tmp_path / 'sharedfile'}"
    for _ in range(2):
        results = finish(_start([[str(SCRIPT), url, str(rank), "2"] for rank in range(2)],
                                 launcher_free_environment(MPIGRAD_RENDEZVOUS_TIMEOUT=30)), timeout=120)
        assert [code for code, _, _ in results] == [0, 0], results
        assert not (tmp_path / "sharedfile").exists()


@pytest.mark.mpi_skip
def test_a_stale_file_from_a_killed_job_does_not_stop_the_next(tmp_path):
    # A job killed during its rendezvous left its file, naming its server's port, now dead.
    # Rank 1 of the next job reads it before rank 0 has replaced it: it must read the file
    # again after the failed connection, not knock on the dead port until the timeout.
    path = tmp_path / "sharedfile"
    stale_server = socket.create_server(("127.0.0.1", 0))
    path.write_text(f"127.0.0.1:{stale_server.getsockname()[1]}\n{'0' * 32}\n")
    path.chmod(0o600)
    env = launcher_free_environment(MPIGRAD_RENDEZVOUS_TIMEOUT=30)
    late = _start([[str(SCRIPT), f"file://{path}", "1", "2"]], env)
    try:
        stale_server.settimeout(60)
        stale_server.accept()[0].close()  # rank 1 has read the stale file and come
    finally:
        stale_server.close()  # and the port is dead from now on
    results = finish(_start([[str(SCRIPT), f"file://{path}", "0", "2"]], env) + late,
                     timeout=120)
    assert [code for code, _, _ in results] == [0, 0], results
    assert _printed(results) == [f"Rank {rank} of 2 has data tensor(3.)" for rank in range(2)]
    assert not path.exists()


# Seconds: time for the ranks that are there to start on a loaded machine, beside the other
# tests' processes.
MISSING_TIMEOUT = 10
BACKGROUND_JOBS = ("incomplete_worlds",)  # see tests/distributed/conftest.py


@pytest.fixture(scope="module")
def incomplete_worlds(tmp_path_factory):
    """The jobs that wait out a rendezvous timeout, started side by side (each mostly waits):
    3-rank worlds with a rank missing, `(method, missing rank)`, and a rank 0 whose partner
    never comes, "timeout". A future of {job: (its URL, its results)}: they
    run in the background while the module's other tests run (BACKGROUND_JOBS)."""
    directory = tmp_path_factory.mktemp("meetings")
    environment = launcher_free_environment(MPIGRAD_RENDEZVOUS_TIMEOUT=MISSING_TIMEOUT)
    urls, jobs = {}, {}
    for method in ("tcp", "file"):
        for missing in (0, 2):
            urls[method, missing] = url = _url(method, directory, f"meeting-{missing}")
            jobs[method, missing] = _start([[str(SCRIPT), url, str(rank), "3"]
                                            for rank in range(3) if rank != missing],
                                           environment)
    code = ("import datetime, mpigrad.distributed as dist\n"
            f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, "
            "world_size=2, timeout=datetime.timedelta(seconds=2))\n")
    jobs["timeout"] = _start([["-c", code]], launcher_free_environment())

    def wait():
        return {job: (urls.get(job), results)
                for job, results in finish_together(jobs, timeout=90).items()}
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(wait)


@pytest.mark.mpi_skip
@pytest.mark.parametrize("missing", [0, 2])
@pytest.mark.parametrize("method", ["tcp", "file"])
def test_a_missing_process_ends_the_others_with_an_error_within_the_timeout(method, missing,
                                                                            incomplete_worlds):
    url, results = incomplete_worlds.result()[method, missing]
    # The errors name the job's own deadline: it ended the job, not the default of 120 s.
    within = f"within {MISSING_TIMEOUT} seconds"
    for code, out, err in results:
        assert code != 0 and "has data" not in out
        assert within in err
        if missing == 2:
            assert f"ranks [2] did not join {within}" in err
        elif method == "tcp":
            assert f"no rendezvous server at {url[len('tcp://'):]} {within}" in err
        else:
            assert "rank 0 did not write" in err


@pytest.mark.mpi_skip
def test_init_process_group_timeout_bounds_the_rendezvous(incomplete_worlds):
    _, [(returncode, out, err)] = incomplete_worlds.result()["timeout"]
    assert returncode != 0 and "ranks [1] did not join within 2 seconds" in err


@pytest.mark.mpi_skip
def test_importing_the_package_does_not_start_mpi_without_a_launcher():
    code = ("import mpigrad.distributed, mpigrad.distributed.rpc, mpigrad.distributed.nn, "
            "mpigrad.distributed.optim, mpigrad.nn.parallel, mpigrad.multiprocessing\n"
            "import mpigrad.distributed.algorithms.ddp_comm_hooks.powerSGD_hook\n"
            "from mpi4py import MPI\n"
            "print(MPI.Is_initialized())\n"
            "mpigrad.distributed.init_process_group()\n"
            "print(MPI.Is_initialized(), MPI.Query_thread() == MPI.THREAD_MULTIPLE, "
            "mpigrad.distributed.get_world_size())\n")
    [(returncode, out, err)] = finish(_start([["-c", code]], launcher_free_environment()), timeout=60)
    assert returncode == 0, err
    assert out.split() == ["False", "True", "True", "1"]
