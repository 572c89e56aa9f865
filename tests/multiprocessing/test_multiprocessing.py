"""mpigrad.multiprocessing against torch.multiprocessing's contract: spawn/start_processes run
fn(i, *args); a child's exception, signal or exit code reaches the parent as torch's exception
within seconds, with the other children ended and no process left; join=False returns the
context. Then the DDP tutorial's `mp.spawn(demo_basic, ...)` at 2 and 3 processes forms one
world and prints what PyTorch prints (PyTorch's own run made once, at 3 processes).

The children run functions of _children.py, which imports neither MPI nor pytest: a spawned
child imports its function's module. The tests of how children are joined and how their
failures reach the parent fork their children instead of spawning them (see `_forked`)."""
import multiprocessing
import os
import pathlib
import pickle
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import mpigrad.multiprocessing as mp
from tests.distributed._environment import job_environment
from tests.multiprocessing import _children as children

HERE = pathlib.Path(__file__).parent
# The DDP tutorial's demo_basic, launched as the tutorial launches it (mp.spawn).
DDP_TUTORIAL = HERE.parent / "examples" / "ddp_main.py"


def _gone(pid):
    return not os.path.exists(f"/proc/{pid}")


def _processes_running(word):
    """The pids of processes whose command line contains `word` (no psutil)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    if word.encode() in file.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _forked(fn, args=(), nprocs=1, join=True):
    """start_processes forking its children: for the tests of how a job's children are joined
    and how their failures reach the parent, which do not depend on how a child started. A
    spawned child is a fresh interpreter importing mpigrad (0.4 s of CPU apiece); spawn
    itself, and the children that form an MPI world, are spawned below."""
    return mp.start_processes(fn, args=args, nprocs=nprocs, join=join, start_method="fork")


def test_spawn_runs_fn_with_the_index_first_then_args(tmp_path):
    assert mp.spawn(children.write_index, args=(str(tmp_path), "hello"), nprocs=3) is None
    texts = [(tmp_path / f"{i}.txt").read_text().split() for i in range(3)]
    assert [t[:2] for t in texts] == [["hello", str(i)] for i in range(3)]
    assert len({t[2] for t in texts} | {str(os.getpid())}) == 4  # three new processes


def test_each_job_gets_a_fresh_rendezvous_secret_shared_by_its_children(tmp_path):
    secrets_seen = []
    for job in range(2):
        folder = tmp_path / str(job)
        folder.mkdir()
        _forked(children.write_secret, args=(str(folder),), nprocs=2)
        secrets_seen.append({(folder / f"{i}.txt").read_text().split()[0] for i in range(2)})
    assert all(len(job) == 1 for job in secrets_seen)  # one secret per job
    first, second = (job.pop() for job in secrets_seen)
    assert first != second and re.fullmatch(r"[0-9a-f]{32}", first)


def test_a_child_that_raises_gives_process_raised_exception_with_its_traceback():
    start = time.monotonic()
    context = _forked(children.raise_in_one, args=(1,), nprocs=3, join=False)
    with pytest.raises(mp.ProcessRaisedException) as info:
        while not context.join(grace_period=1):
            pass
    assert time.monotonic() - start < 30
    error = info.value
    assert str(error).startswith("\n\n-- Process 1 terminated with the following error:\n"
                                 "Traceback (most recent call last):")
    assert "ValueError: child 1 fails on purpose" in str(error)
    assert "raise_in_one" in str(error)  # the child's own frames
    assert (error.error_index, error.error_pid) == (1, context.pids()[1])
    assert all(_gone(pid) for pid in context.pids())
    assert not any(os.path.exists(path) for path in context.error_files)


def test_spawn_join_raises_too_and_leaves_no_process():
    start = time.monotonic()
    with pytest.raises(mp.ProcessRaisedException, match="child 0 fails on purpose"):
        mp.spawn(children.raise_in_one, args=(0,), nprocs=2)
    assert time.monotonic() - start < 45
    assert mp.active_children() == []


def test_a_killed_child_gives_process_exited_exception_with_the_signal():
    context = _forked(children.kill_self, nprocs=2, join=False)
    with pytest.raises(mp.ProcessExitedException) as info:
        while not context.join():
            pass
    error = info.value
    assert str(error) == "process 0 terminated with signal SIGKILL"
    assert (error.error_index, error.exit_code, error.signal_name) == (0, -9, "SIGKILL")
    assert all(_gone(pid) for pid in context.pids())


def test_a_non_zero_exit_gives_process_exited_exception_with_the_code():
    with pytest.raises(mp.ProcessExitedException) as info:
        _forked(children.exit_with, args=(3,), nprocs=2)
    assert str(info.value) == "process 1 terminated with exit code 3"
    assert (info.value.exit_code, info.value.signal_name) == (3, None)


@pytest.mark.parametrize("ways, expected", [
    (("exit", "kill", "ok"), (mp.ProcessExitedException, "process 1 terminated with signal "
                                                         "SIGKILL")),
    (("exit", "exit", "raise"), (mp.ProcessRaisedException, "Process 2 terminated")),
])
def test_when_several_children_failed_the_cause_is_reported(ways, expected):
    # As in an MPI world, where one child's failure makes the others exit with code 1: all
    # have ended before join looks, and the one that raised (or was killed) is the cause.
    context = _forked(children.fail_in_several_ways, args=(ways,), nprocs=3, join=False)
    for process in context.processes:  # the standard library's join: it waits, raises nothing
        process.join(timeout=60)
    assert not any(process.is_alive() for process in context.processes)
    with pytest.raises(expected[0], match=expected[1]):
        context.join()


def test_join_false_returns_the_context_and_join_with_a_timeout_says_if_all_are_done():
    context = _forked(children.sleep, args=(1.0,), nprocs=2, join=False)
    assert isinstance(context, mp.ProcessContext) and len(context.pids()) == 2
    assert context.join(timeout=0.01) is False
    deadline = time.monotonic() + 60
    while not context.join(timeout=1):
        assert time.monotonic() < deadline
    assert context.join() is True  # and again, once done
    assert [p.exitcode for p in context.processes] == [0, 0]


def test_spawn_warns_about_another_start_method_and_start_processes_takes_it(tmp_path):
    with pytest.warns(FutureWarning, match="only supports start_method=spawn"):
        mp.spawn(children.write_index, args=(str(tmp_path), "s"), nprocs=1, start_method="fork")
    mp.start_processes(children.write_index, args=(str(tmp_path), "f"), nprocs=2,
                       start_method="fork")
    assert (tmp_path / "1.txt").read_text().startswith("f 1")


def test_exceptions_pickle_as_torchs_do():
    raised = pickle.loads(pickle.dumps(mp.ProcessRaisedException("m", 1, 42)))
    assert (type(raised), str(raised), raised.error_index, raised.error_pid) == (
        mp.ProcessRaisedException, "m", 1, 42)
    exited = pickle.loads(pickle.dumps(mp.ProcessExitedException("x", 0, 7, -9, "SIGKILL")))
    assert (exited.exit_code, exited.signal_name, exited.error_pid) == (-9, "SIGKILL", 7)
    assert issubclass(mp.ProcessExitedException, mp.ProcessException)


def test_the_standard_library_is_there_as_in_torch():
    for name in ("Process", "Queue", "set_start_method", "get_context", "Manager", "Pipe"):
        assert getattr(mp, name) is getattr(multiprocessing, name)


# Children in one MPI world: they meet through init_process_group (see
# mpigrad.distributed.launch.rendezvous). One fails; the parent must hear of it within seconds
# and no process (child, or rank 0's rendezvous server) may stay behind.

@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failing_child_in_an_mpi_world_ends_the_spawn_within_seconds(how):
    port = children.free_port()
    start = time.monotonic()
    context = mp.spawn(children.in_one_world, args=(3, port, how), nprocs=3, join=False)
    if how == "raise":
        with pytest.raises(mp.ProcessRaisedException,
                           match="(?s)Process 2 terminated.*rank 2 of 3 fails on purpose"):
            while not context.join():
                pass
    else:
        with pytest.raises(mp.ProcessExitedException,
                           match="process 2 terminated with signal SIGKILL"):
            while not context.join():
                pass
    assert time.monotonic() - start < 60
    assert all(_gone(pid) for pid in context.pids())
    deadline = time.monotonic() + 15
    while _processes_running(f"pmi_server.py\x000.0.0.0\x00{port}\x00"):
        assert time.monotonic() < deadline, "rank 0's rendezvous server stayed behind"
        time.sleep(0.2)


def test_children_of_a_parent_that_set_world_size_and_master_join_with_their_rank(
        monkeypatch, tmp_path):
    # Scripts often set WORLD_SIZE with MASTER_ADDR/MASTER_PORT in the parent; each child
    # inherits them without RANK and passes its rank to init_process_group.
    for name, value in (("WORLD_SIZE", "3"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", str(children.free_port()))):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RANK", raising=False)
    mp.spawn(children.join_in_the_parents_world, args=(str(tmp_path),), nprocs=3)
    assert [(tmp_path / f"{i}.txt").read_text().split()[:3] for i in range(3)] == [
        ["3", "6", str(i)] for i in range(3)]


def _run_tutorial(script, size, cwd):
    return subprocess.run(["timeout", "-k", "10", "600", sys.executable, str(script), str(size)],
                          env=job_environment(EXAMPLE_PORT=children.free_port()), cwd=cwd,
                          capture_output=True, text=True)


def _messages(output):
    """What the ranks printed, in any order (they share one pipe), numbers masked."""
    found = re.findall(r"(Running basic DDP example on rank \d+\.|"
                       r"rank \d+ demo_basic checksum -?\d+\.\d+)", output)
    return sorted(re.sub(r"checksum -?\d+\.\d+", "checksum #", line) for line in found)


def _expected_messages(size):
    return sorted([f"Running basic DDP example on rank {r}." for r in range(size)]
                  + [f"rank {r} demo_basic checksum #" for r in range(size)])


def _ranks_below(size, messages):
    return [line for line in messages if int(re.search(r"rank (\d+)", line).group(1)) < size]


TUTORIAL_SIZES = (2, 3)


@pytest.fixture(scope="module")
def torch_tutorial(tmp_path_factory):
    """torch's run of the tutorial, made once (on the first call) at the largest of
    TUTORIAL_SIZES: what the tests compare is the lines each rank prints, and that run shows
    them for every rank of the smaller worlds too. Its ranks are forked from the process that
    imported torch: spawned, each would import torch again (1.5 s of CPU apiece, most of the
    run's), and how a rank started does not change what it prints. (Not side by side with
    ours: on a busy machine the ranks of concurrent worlds only slow each other.)"""
    runs = []

    def run():
        if not runs:
            folder = tmp_path_factory.mktemp("torch_tutorial")
            script = folder / "ddp_tutorial_torch.py"
            source = re.sub(r"^.*# torch: (.*)$", r"\1", DDP_TUTORIAL.read_text(), flags=re.M)
            spawned = "mp.spawn(spawned_demo_basic, args=(world_size,), nprocs=world_size,"
            assert spawned in source, "the tutorial's launch has changed: fork its ranks anew"
            script.write_text(source.replace(spawned, "mp.start_processes(spawned_demo_basic, "
                                             "args=(world_size,), nprocs=world_size, "
                                             "start_method='fork',"))
            runs.append(_run_tutorial(script, max(TUTORIAL_SIZES), folder))
        return runs[0]
    return run


@pytest.mark.parametrize("size", TUTORIAL_SIZES)
def test_the_ddp_tutorials_spawn_forms_one_world_and_prints_what_torch_prints(size, tmp_path,
                                                                             torch_tutorial):
    result = _run_tutorial(DDP_TUTORIAL, size, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    ours = result.stdout
    assert _messages(ours) == _expected_messages(size)
    # DDP made every rank's parameters rank 0's and averaged the gradients: one world.
    assert len(set(re.findall(r"checksum (-?\d+\.\d+)", ours))) == 1
    pytest.importorskip("torch")
    theirs = torch_tutorial()
    if (theirs.returncode != 0
            and _messages(theirs.stdout) != _expected_messages(max(TUTORIAL_SIZES))):
        # The oracle itself failed (torch's gloo has aborted at exit on this machine): there is
        # nothing to compare with, which is not mpigrad's failure.
        pytest.skip(f"torch's own run of the tutorial failed: {theirs.stderr[-500:]}")
    assert _messages(ours) == _ranks_below(size, _messages(theirs.stdout))


def _run_lingering_parent(start_method, folder):
    # The parent is a fresh interpreter: the test session's may hold its process group, which
    # a forked child would inherit (as a torch child would inherit torch's).
    parent = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import _children; "
              f"_children.lingering_world({start_method!r}, {str(folder)!r})")
    return subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                          timeout=240)


START_METHODS = ("spawn", "fork", "forkserver")


@pytest.fixture(scope="module")
def lingering_worlds(tmp_path_factory):
    """A lingering world per start method, all started together (most of each one's time is
    processes starting, meeting and rank 0 lingering): {start_method: (its folder, future
    of its parent's CompletedProcess)}."""
    folders = {method: tmp_path_factory.mktemp(method) for method in START_METHODS}
    with ThreadPoolExecutor(max_workers=len(START_METHODS)) as pool:
        yield {method: (folder, pool.submit(_run_lingering_parent, method, folder))
               for method, folder in folders.items()}


@pytest.mark.parametrize("start_method", START_METHODS)
def test_children_leave_their_world_cleanly_when_one_lingers(start_method, lingering_worlds):
    # Rank 0 works on after the others returned: they wait for it in MPI_Finalize, and no
    # rank's end is taken for a crash (which would end the others with exit code 1).
    folder, parent = lingering_worlds[start_method]
    result = parent.result()
    assert result.returncode == 0, result.stderr[-3000:]
    assert [(folder / f"{i}.txt").read_text().split()[:3] for i in range(3)] == [
        ["3", "6", str(i)] for i in range(3)]


@pytest.mark.parametrize("size", [2, 3])
def test_spawned_children_form_one_rpc_world(size, tmp_path):
    # The RPC tutorials' launch: mp.spawn, MASTER_ADDR/MASTER_PORT, init_rpc(rank, world_size).
    mp.spawn(children.rpc_world, args=(size, children.free_port(), str(tmp_path)), nprocs=size)
    assert [(tmp_path / f"{i}.txt").read_text().split()[:3] for i in range(size)] == [
        [str((i + 1) % size), f"{1 + i:g}", str(i)] for i in range(size)]


def test_a_process_started_by_a_launched_rank_drops_the_launchers_variables(monkeypatch):
    from mpigrad.multiprocessing import launched
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_FD", "7")
    monkeypatch.setenv("HYDI_CONTROL_FD", "9")
    monkeypatch.setenv(launched.OWNER, str(os.getppid()))  # as if our parent were the rank
    launched.settle()
    assert not {"PMI_RANK", "PMI_FD", "HYDI_CONTROL_FD", launched.OWNER} & set(os.environ)
    # A rank of a nested launch (its parent is not the recorded rank) records itself.
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv(launched.OWNER, "1")
    launched.settle()
    assert os.environ["PMI_RANK"] == "0" and os.environ[launched.OWNER] == str(os.getpid())
    launched.settle()  # the rank itself keeps its place
    assert os.environ["PMI_RANK"] == "0"
