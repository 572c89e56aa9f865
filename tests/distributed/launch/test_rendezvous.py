"""Launching without mpiexec: processes started as torchrun starts them (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) become one MPI world, or fail within seconds saying how to launch.
Never N worlds of one. The subprocess tests run serially (they start their own processes); the
parsing tests run everywhere."""
import os
import pathlib
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpigrad.distributed.launch import pmi_server, rendezvous
from mpigrad.distributed.launch.pmi_server import process_mapping

from .._environment import launcher_free_environment
from .._helpers import finish, finish_together
from ._ports import free_port

HERE = pathlib.Path(__file__).parent
SCRIPT = HERE / "launch_check.py"


def test_environment_requests():
    env = {"WORLD_SIZE": "3", "RANK": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    request = rendezvous.request_from_environment(env)
    assert (request.rank, request.world_size, request.host, request.port) == (2, 3, "node0",
                                                                               29500)
    torchrun = dict(env, TORCHELASTIC_USE_AGENT_STORE="True")
    assert rendezvous.request_from_environment(torchrun).port == 29501
    assert rendezvous.request_from_environment(
        dict(torchrun, MPIGRAD_RENDEZVOUS_PORT="4000")).port == 4000
    assert rendezvous.request_from_environment({}) is None
    with pytest.raises(ValueError, match="WORLD_SIZE=3 is set but MASTER_ADDR is not"):
        rendezvous.request_from_environment({"WORLD_SIZE": "3", "RANK": "0",
                                             "MASTER_PORT": "1"})
    with pytest.raises(ValueError, match="WORLD_SIZE must be an integer"):
        rendezvous.request_from_environment({"WORLD_SIZE": "two"})


def test_init_method_requests():
    tcp = rendezvous.request_from_init_method("tcp://10.0.0.1:23456", 1, 4, environ={})
    assert (tcp.host, tcp.port, tcp.rank, tcp.world_size) == ("10.0.0.1", 23456, 1, 4)
    query = rendezvous.request_from_init_method("tcp://h:1?rank=2&world_size=3", -1, -1, {})
    assert (query.rank, query.world_size) == (2, 3)
    shared = rendezvous.request_from_init_method("file:///tmp/meet", 0, 2, environ={})
    assert shared.path == "/tmp/meet"
    env = rendezvous.request_from_init_method(
        "env://", -1, -1, {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "a",
                           "MASTER_PORT": "5"})
    assert (env.rank, env.world_size) == (1, 2)
    for url, message in [("env://", "WORLD_SIZE is not set"), ("tcp://h", "needs rank"),
                         ("udp://h:1", "expected an env://")]:
        with pytest.raises(ValueError, match=message):
            rendezvous.request_from_init_method(url, -1, -1, environ={})


def test_process_mapping_groups_consecutive_ranks_by_host():
    assert process_mapping(["a", "a", "a"]) == "(vector,(0,1,3))"
    assert process_mapping(["a", "a", "b", "b"]) == "(vector,(0,1,2),(1,1,2))"
    assert process_mapping(["a", "b", "a"]) == "(vector,(0,1,1),(1,1,1),(0,1,1))"


def _start_world(sizes, port, extra=None, args=()):
    """One process per entry of `sizes` (the WORLD_SIZE each is told), rank = position."""
    return [subprocess.Popen([sys.executable, str(SCRIPT), *args], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=launcher_free_environment(RANK=rank, WORLD_SIZE=size,
                                                    MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                                    **(extra or {})))
            for rank, size in enumerate(sizes)]


@pytest.mark.mpi_skip
@pytest.mark.parametrize("size", [2, 3])
def test_torchrun_style_processes_form_one_mpi_world(size):
    results = finish(_start_world([size] * size, free_port(), args=["gloo"]))
    expected_sum = size * (size + 1) // 2
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, err
        assert f"rank {rank} of {size} sum {expected_sum} local {size}" in out


@pytest.mark.mpi_skip
def test_disagreeing_world_sizes_fail_within_seconds_on_every_rank():
    start = time.monotonic()
    results = finish(_start_world([2, 3], free_port()), timeout=60)
    assert time.monotonic() - start < 30
    for code, out, err in results:
        assert code != 0 and "rank" not in out
        assert "rank 1 was started with world size 3, but rank 0 with 2" in err
        assert "mpiexec -n N" in err


@pytest.mark.mpi_skip
def test_a_rank_that_comes_after_the_refusal_hears_why_at_once():
    # Rank 1's hello, with another world size, can reach rank 0's server before rank 0's own
    # (rank 0, just woken from reading the server's "ready", is slower on a loaded machine).
    # The refusing server then ended before rank 0 came, and rank 0 knocked on its port until
    # its whole timeout had passed: the test above hung so.
    listener = pmi_server.listen("127.0.0.1", 0)
    server = pmi_server.Server(2, 60)
    runner = threading.Thread(target=server.run, args=(listener,), daemon=True)
    runner.start()
    host, port = listener.getsockname()
    try:
        for rank, size in [(1, 3), (0, 2)]:
            with pytest.raises(RuntimeError, match="refused to form the world: rank 1 was "
                                                   "started with world size 3, but rank 0 "
                                                   "with 2"):
                rendezvous._check_in(rendezvous.Request(rank, size), host, port, "",
                                     time.monotonic() + 15, 15)
            runner.join(0.5)  # time for a server that does not wait for rank 0 to end
        runner.join(30)
        assert not runner.is_alive()  # every rank has heard why: nothing left to wait for
    finally:
        listener.close()


@pytest.mark.mpi_skip
def test_a_refused_worlds_server_waits_for_the_ranks_yet_to_hear_only_a_moment(monkeypatch):
    # Rank 0 never comes: its server must not hold the port (which a corrected relaunch may
    # want) for the whole rendezvous timeout.
    monkeypatch.setattr(pmi_server, "REFUSAL_GRACE_SECONDS", 0.2)
    listener = pmi_server.listen("127.0.0.1", 0)
    runner = threading.Thread(target=pmi_server.Server(2, 60).run, args=(listener,),
                              daemon=True)
    runner.start()
    try:
        with pytest.raises(RuntimeError, match="rank 1 was started with world size 3"):
            rendezvous._check_in(rendezvous.Request(1, 3), *listener.getsockname(), "",
                                 time.monotonic() + 15, 15)
        runner.join(30)
        assert not runner.is_alive()
    finally:
        listener.close()


WAITING_TIMEOUT = 10  # seconds: time for a rank to start beside the other tests' processes
BACKGROUND_JOBS = ("worlds_that_time_out",)  # see tests/distributed/conftest.py


@pytest.fixture(scope="module")
def worlds_that_time_out():
    """The jobs that wait out their rendezvous timeout, started side by side: a future of
    {job: results}. "missing": 2 ranks of 3, whose server waits for the third. "secrets": 2
    ranks with different secrets; rank 0's server waits for rank 1, which is refused. Mostly
    waiting, they run in the background while the module's other tests run (BACKGROUND_JOBS),
    so their timeout, long enough for the ranks there to start on a loaded machine, costs the
    module no time."""
    port = free_port()
    secrets = [subprocess.Popen([sys.executable, str(SCRIPT)], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=launcher_free_environment(RANK=rank, WORLD_SIZE=2,
                                                              MASTER_ADDR="127.0.0.1",
                                                              MASTER_PORT=port,
                                                              MPIGRAD_RENDEZVOUS_TIMEOUT=(
                                                                  WAITING_TIMEOUT),
                                                              MPIGRAD_RENDEZVOUS_SECRET=secret))
               for rank, secret in enumerate(["ours", "a guess"])]
    missing = _start_world([3, 3], free_port(),
                           extra={"MPIGRAD_RENDEZVOUS_TIMEOUT": WAITING_TIMEOUT})
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(finish_together, {"missing": missing, "secrets": secrets},
                          timeout=90)


@pytest.mark.mpi_skip
def test_one_rank_failing_ends_every_rank():
    results = finish(_start_world([3] * 3, free_port(), extra={"LAUNCH_CHECK_ABORT": 1}),
                      timeout=120)
    assert [code for code, _, _ in results] == [1, 1, 1]
    assert "this rank fails on purpose" in results[1][2]


@pytest.mark.mpi_skip
def test_a_rank_leaving_cleanly_ends_no_other_rank():
    # Rank 0 leaves with os._exit, which skips MPICH's PMI finalize, while rank 1 still runs:
    # only its goodbye tells the server this is no crash.
    results = finish(_start_world([2] * 2, free_port(), extra={"LAUNCH_CHECK_LEAVE": 0}),
                     timeout=60)
    assert [code for code, _, _ in results] == [0, 0], results
    assert "rank 1 left after MPI_Finalize" in results[1][1]
    assert not any("crashed" in err or "ended the job" in err for _, _, err in results)


@pytest.mark.mpi_skip
def test_a_killed_rank_is_named_as_crashed_and_ends_the_others():
    start = time.monotonic()
    results = finish(_start_world([2] * 2, free_port(), extra={"LAUNCH_CHECK_KILL": 1}),
                     timeout=60)
    assert [code for code, _, _ in results] == [1, -9], results
    assert "mpigrad: rank 1 crashed" in results[0][2]
    assert time.monotonic() - start < 30


@pytest.mark.mpi_skip
def test_mpi_abort_ends_every_rank_with_its_code_itself_included():
    # MPI_Abort leaves ending the process to the process manager, as under mpiexec.
    start = time.monotonic()
    results = finish(_start_world([2] * 2, free_port(), extra={"LAUNCH_CHECK_MPI_ABORT": 1}),
                      timeout=60)
    assert [code for code, _, _ in results] == [3, 3], results
    assert "rank 1 ended the job (exit code 3)" in results[0][2]
    assert time.monotonic() - start < 30


@pytest.mark.mpi_skip
def test_torchrun_gives_a_two_rank_world():
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun (PyTorch, the oracle extra) is not installed")
    port = free_port()
    result = subprocess.run([torchrun, "--nproc_per_node=2", f"--master_port={port}",
                             str(SCRIPT)], env=launcher_free_environment(), text=True,
                            capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "crashed" not in result.stderr and "ended the job" not in result.stderr
    assert "rank 0 of 2 sum 3 local 2" in result.stdout
    assert "rank 1 of 2 sum 3 local 2" in result.stdout


@pytest.mark.mpi_skip
def test_ranks_sharing_a_secret_form_a_world():
    results = finish(_start_world([2, 2], free_port(), args=["gloo"],
                                   extra={"MPIGRAD_RENDEZVOUS_SECRET": "ours"}))
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, err
        assert f"rank {rank} of 2 sum 3 local 2" in out


# What any process that reaches the rendezvous port could send: hellos, MPI's own PMI
# handshake for a rank that exists and for one that does not, followed by a forged business
# card and a barrier, a PMI connection with a wrong and with no proof, and 8 MiB without a
# newline.
ATTACKS = [b"cmd=mpigrad_hello rank=0 size=2 host=x\n",
           b"cmd=mpigrad_hello rank=1 size=3 host=x\n",
           b"cmd=initack pmiid=77\n",
           b"cmd=initack pmiid=1\ncmd=put kvsname=k key=bc-1 value=forged\ncmd=barrier_in\n",
           b"cmd=mpigrad_pmi rank=0 nonce=c proof=" + b"0" * 64 + b"\n",
           b"cmd=mpigrad_pmi rank=1\n",
           b"cmd=mpigrad_hello " + b"x" * (8 * 2 ** 20)]


def _attack(address, payload):
    """What the rendezvous answers `payload`: None when it does not even accept the
    connection, else the bytes it sent until it closed it."""
    try:
        conn = socket.create_connection(address, timeout=10)
    except ConnectionRefusedError:
        return None
    received = b""
    with conn:
        try:
            conn.sendall(payload)
            while chunk := conn.recv(4096):
                received += chunk
        except OSError:
            pass
    return received


@pytest.mark.mpi_skip
def test_a_torchrun_job_trains_on_through_outside_connections(tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun (PyTorch, the oracle extra) is not installed")
    go_on, errors = tmp_path / "go-on", tmp_path / "stderr"
    with open(errors, "w") as stderr:
        job = subprocess.Popen([torchrun, "--standalone", "--nproc_per_node=2",
                                str(HERE / "rendezvous_train.py"), str(go_on)],
                               env=launcher_free_environment(), text=True, stdout=subprocess.PIPE,
                               stderr=stderr)
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in job.stdout],
                              daemon=True)
    reader.start()
    try:
        line = lines.get(timeout=120)
        assert line.startswith("training; rendezvous at"), line
        host, port = line.split()[-2:]
        address = (host, int(port))
        answers = [_attack(address, payload) for payload in ATTACKS]
        idle = []
        for _ in range(200):
            try:
                idle.append(socket.create_connection(address, timeout=10))
            except ConnectionRefusedError:
                pass
        time.sleep(1.0)  # the job trains on meanwhile
        for conn in idle:
            conn.close()
        go_on.touch()
        job.wait(timeout=120)
    finally:
        job.kill()
    reader.join(10)
    output, err = "".join(lines.queue), errors.read_text()
    for answer in answers:
        assert answer is None or not any(word in answer for word in (
            b"welcome", b"initack", b"put_result", b"barrier_out", b"pmi_ok")), answer
    assert job.returncode == 0, err
    for rank in range(2):
        assert f"rank {rank} trained" in output and "parameters agree: True" in output, output
    assert "ended the job" not in err and "crashed" not in err and "could not form" not in err


# A rank of a file:// rendezvous, alone: it reads the file and joins whatever world it names.
FILE_RANK = ("import sys\n"
             "from mpigrad.distributed.launch import rendezvous as r\n"
             "r.join(r.Request(1, 2, path=sys.argv[1]), timeout=3)\n")


def _plant(path, kind, content):
    """Something other than rank 0's file at `path`, holding `content` where it can."""
    if kind == "fifo":
        os.mkfifo(path)
        return
    target = path if kind != "symlink" else path.with_name("elsewhere")
    target.write_text(content)
    target.chmod(0o666 if kind == "open to others" else 0o600)
    if kind == "another user's":
        os.chown(target, 65534, 65534)
    elif kind == "symlink":
        path.symlink_to(target)


@pytest.mark.mpi_skip
@pytest.mark.parametrize("kind, problem", [
    ("open to others", "may be read or written by others than its owner (mode -rw-rw-rw-)"),
    ("another user's", "belongs to uid 65534"),
    ("fifo", "is not a regular file (mode prw"),
    ("symlink", "is a symbolic link"),
])
def test_a_rank_trusts_no_rendezvous_file_but_rank_0s(tmp_path, kind, problem):
    # Planted before the job: it names a server that the planted secret "proves". Such a file
    # took a rank into the planter's world, and a FIFO held it in open() past its timeout.
    if kind == "another user's" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    listener = pmi_server.listen("127.0.0.1", 0)
    planter = pmi_server.Server(2, 60, "planted")
    threading.Thread(target=planter.run, args=(listener,), daemon=True).start()
    path = tmp_path / "meeting"
    _plant(path, kind, f"127.0.0.1:{listener.getsockname()[1]}\nplanted\n")
    try:
        result = subprocess.run([sys.executable, "-c", FILE_RANK, str(path)], text=True,
                                capture_output=True, env=launcher_free_environment(),
                                timeout=60)
    finally:
        planter.abort("1", -1)
    assert result.returncode != 0
    assert f"the rendezvous file {path} {problem}" in result.stderr, result.stderr
    assert not planter.hosts  # it never said hello to the planter's server


def test_the_rendezvous_file_must_belong_to_this_user(tmp_path, monkeypatch):
    # The other half of the ownership rule, without root: to another user this file is foreign.
    path = tmp_path / "meeting"
    path.write_text("host:1\nsecret\n")
    path.chmod(0o600)
    request = rendezvous.Request(1, 2, path=str(path))
    assert rendezvous._rendezvous_file_content(request) == (("host", 1), "secret")
    real_geteuid = os.geteuid
    monkeypatch.setattr(os, "geteuid", lambda: real_geteuid() + 1)
    with pytest.raises(RuntimeError, match=f"belongs to uid {real_geteuid()}, not to this "
                                           f"process's user \\(uid {real_geteuid() + 1}\\)"):
        rendezvous._rendezvous_file_content(request)


@pytest.mark.mpi_skip
def test_rank_0_that_cannot_replace_the_file_says_so_and_leaves_nothing(tmp_path, monkeypatch):
    # What rename(2) answers in a sticky directory (/tmp) when another user's file has the
    # name: rank 0 cannot put its own in place.
    def refused(source, target):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refused)
    path = tmp_path / "meeting"
    with pytest.raises(RuntimeError, match=f"rank 0 cannot write the rendezvous file {path}: "
                                           "Operation not permitted"):
        rendezvous._write_rendezvous_file(rendezvous.Request(0, 2, path=str(path)), "", 5)
    assert list(tmp_path.iterdir()) == [] and "server" not in rendezvous._control


# Last: the worlds they read have waited out their timeouts meanwhile.
@pytest.mark.mpi_skip
def test_a_missing_rank_is_an_error_naming_it_after_the_timeout(worlds_that_time_out):
    # The error names the job's own deadline: it ended the job, not the default of 120 s.
    for code, out, err in worlds_that_time_out.result()["missing"]:
        assert code != 0
        assert f"ranks [2] did not join within {WAITING_TIMEOUT} seconds" in err


@pytest.mark.mpi_skip
def test_ranks_with_different_secrets_do_not_form_a_world(worlds_that_time_out):
    [(code0, out0, err0), (code1, out1, err1)] = worlds_that_time_out.result()["secrets"]
    assert code0 != 0 and code1 != 0 and "sum" not in out0 + out1
    assert "the rendezvous secret does not match rank 0's" in err1
    assert f"ranks [1] did not join within {WAITING_TIMEOUT} seconds" in err0
