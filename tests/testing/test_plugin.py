"""mpigrad's pytest plugin, on test files run under their own mpiexec (so serial only: these
tests are not MPI-marked, and the MPI steps deselect them).

Each run's ranks write their reports to `--mpi-logs`, read here rank by rank: the ranks'
console output interleaves. The example modules that run on 3 ranks run in one session (one
launch, `three_ranks`), each test reading its own module's reports: a pytest rank costs about
a second of CPU to start."""
import functools
import re
import shutil
import subprocess
import sys

import pytest

from mpigrad.testing.world import _installed_as_entry_point
from tests.distributed._environment import job_environment
from tests.testing import examples

MPIEXEC = shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")
# The plugin by its entry point once mpigrad is installed from this tree, else by name.
PLUGIN = [] if _installed_as_entry_point() else ["-p", "mpigrad.testing.plugin"]


# The example modules' file names (the tests read their reports by them).
ISOLATION, HANG, COLLECTION, WORLD = "test_isolation.py", "test_hang.py", "test_collection.py", \
    "test_world.py"


def run(tmp_path, modules, ranks=None, *options):
    """Run `modules` ({file name: source}) as test modules in one session, in that order,
    under `mpiexec -n ranks` (plain pytest when None); returns (exit status, console output,
    {rank: its log})."""
    for name, source in modules.items():
        (tmp_path / name).write_text(source)
    logs = tmp_path / "logs"
    command = [sys.executable, "-m", "pytest", *PLUGIN, "-q", "-p", "no:cacheprovider",
               "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"),
               "--mpi-logs", str(logs), *modules, *options]
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    if ranks is not None:
        command = [MPIEXEC, "-n", str(ranks)] + command
    result = subprocess.run(["timeout", "-k", "10", "300"] + command, cwd=tmp_path,
                            capture_output=True, text=True, env=job_environment())
    output = result.stdout + result.stderr
    assert result.returncode != 124, f"the run hung:\n{output}"
    found = {int(p.stem.split("-")[1]): p.read_text() for p in logs.glob("rank-*.log")} \
        if logs.exists() else {}
    return result.returncode, output, found


def line_of(source, text):
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def outcome(log, module, test, when="call"):
    """The outcome line of `test`'s phase in a rank's log, and the text up to the next one."""
    start = log.index(f"{module}::{test} {when}: ")
    following = re.compile(r"\n\w+\.py::").search(log, start + 1)
    return log[start:following.start()] if following else log[start:]


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    """The run of HANG, ISOLATION and WORLD in one session of 3 ranks. The hang first: the
    report of where each rank was counts the session's collectives, and names the hang's
    all_reduce #1 as in a session of its own; the other modules then run after a hang that
    the plugin ended, and must still pass or fail exactly as on their own."""
    return run(tmp_path_factory.mktemp("three_ranks"), {
        HANG: examples.HANG, ISOLATION: examples.ISOLATION, WORLD: examples.WORLD}, 3, "-rA")


# What rank 0's summary counts: the ISOLATION module's 7 failed, 6 passed and 1 skipped, with
# (on 3 ranks) the HANG module's hang and the test after it, and WORLD's test_three_ranks and
# test_plain passed and its world(2) test skipped.
SUMMARY = {2: "rank 0: 7 failed, 6 passed, 1 skipped", 3: "rank 0: 8 failed, 9 passed, 2 skipped"}


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_failure_on_one_rank_fails_the_test_on_every_rank(tmp_path, ranks, request):
    status, output, logs = (request.getfixturevalue("three_ranks") if ranks == 3
                            else run(tmp_path, {ISOLATION: examples.ISOLATION}, ranks))
    assert status == 1, output
    assert sorted(logs) == list(range(ranks)), output
    for rank, log in logs.items():
        outcome_of = functools.partial(outcome, log, ISOLATION)
        a = outcome_of("test_a")
        assert a.startswith(f"{ISOLATION}::test_a call: failed"), log
        assert "call failed on ranks" in a and "rank 1: ValueError: rank 1 only" in a, log
        if rank != 1:  # its second all_reduce ends at once, naming rank 1 and where it left
            assert f"RankLeftTestError: rank 1 left {ISOLATION}::test_a (call) at " in a
            assert f"{ISOLATION}:{line_of(examples.ISOLATION, 'rank 1 only')}: " \
                   "ValueError: rank 1 only" in a, log
        first = outcome_of("test_assert_before_collective")
        assert "failed" in first.splitlines()[0]
        assert "rank 1: AssertionError: rank 1 fails first" in first, log
        received = outcome_of("test_recv_from_a_rank_that_failed")
        assert "rank 1: RuntimeError: rank 1 sends nothing" in received, log
        if rank == 0:
            assert "RankLeftTestError: rank 1 left" in received, log
        skipped = outcome_of("test_skipped_on_rank_0_only")
        assert "failed" in skipped.splitlines()[0]
        others = "rank 1" if ranks == 2 else "ranks 1, 2"
        assert (f"skipped on rank 0 but not on {others}: a test must be skipped on every rank "
                f"or on none") in skipped, log
        assert "rank 0: skipped: rank 0 skips" in skipped, log
        # Setup failing on one rank: an error on every rank; the others ran the call, which
        # pytest would not have, so it is not reported.
        setup = outcome_of("test_setup_fails_on_rank_1", "setup")
        assert setup.startswith(f"{ISOLATION}::test_setup_fails_on_rank_1 setup: failed")
        assert f"setup failed on rank 1 of {ranks}" in setup, log
        assert "rank 1: ValueError: setup fails on rank 1" in setup, log
        assert "test_setup_fails_on_rank_1 call:" not in log
        # Teardown's collectives run, with the right values, after a call that failed.
        assert "rank 1: AssertionError: rank 1 fails the call" in outcome_of(
            "test_teardown_collective_after_a_failure"), log
        assert "test_teardown_collective_after_a_failure teardown:" not in log
        # A teardown failing on one rank fails on every rank.
        assert outcome_of("test_teardown_fails_on_rank_1").startswith(
            f"{ISOLATION}::test_teardown_fails_on_rank_1 call: passed"), log
        teardown = outcome_of("test_teardown_fails_on_rank_1", "teardown")
        assert f"teardown failed on rank 1 of {ranks}" in teardown, log
        assert "rank 1: RuntimeError: teardown fails on rank 1" in teardown, log
        # The tests after a failed one pass, with the right sums: nothing crossed over.
        for test in ("test_b", "test_after_assert", "test_same_on_all_ranks_passes",
                     "test_same_on_all_ranks_reports_the_rank", "test_shared_tmp_path",
                     "test_last"):
            assert outcome_of(test).startswith(f"{ISOLATION}::{test} call: passed"), log
        assert "test_skipped_everywhere call: skipped" in log
    assert "mpigrad: outcomes on every rank" in output
    assert SUMMARY[ranks] in output, output


def test_a_hang_fails_on_every_rank_after_the_timeout_naming_where_each_was(three_ranks):
    status, output, logs = three_ranks
    assert status == 1, output
    assert sorted(logs) == [0, 1, 2], output
    for rank, log in logs.items():
        hang = outcome(log, HANG, "test_hang")
        assert "failed" in hang.splitlines()[0], log
        assert f"TestTimeoutError: {HANG}::test_hang (call) ran longer than its " \
               "timeout (2 s" in hang, log
        assert "rank 1: not in any collective: at " in hang, log
        assert any(f"{HANG}:{line_of(examples.HANG, text)} in test_hang" in hang
                   for text in ("while True", "pass")), log  # the loop's either line
        for waiting in (0, 2):
            # A rank caught between two polls of its wait (a loaded machine) is reported at
            # the line it runs, with the call it is in as its last call.
            assert re.search(rf"rank {waiting}: (waiting in|not in any collective: .*\(its "
                             rf"last call:) the check before all_reduce #1 on the default group",
                             hang), log
        assert "test_hang teardown:" not in log  # its collective ran: it has its own timeout
        assert outcome(log, HANG, "test_after_hang").startswith(
            f"{HANG}::test_after_hang call: passed"), log


def test_different_collections_are_an_error_at_the_start(tmp_path):
    status, output, _ = run(tmp_path, {COLLECTION: examples.COLLECTION}, 2)
    assert status == 4, output  # pytest's usage error, on every rank, before any test ran
    assert ("the ranks collected different tests" in output
            and f"rank 1 collected 2 tests, rank 0 3; test #2 is {COLLECTION}::test_after "
                f"on rank 1, {COLLECTION}::test_only_on_rank_0 on rank 0") in output, output
    assert " passed" not in output
    # --no-mpi-isolation: each rank runs what it collected, unchecked.
    status, output, _ = run(tmp_path, {COLLECTION: examples.COLLECTION}, 2,
                            "--no-mpi-isolation")
    assert status == 0 and "3 passed" in output and "2 passed" in output, output


@pytest.mark.parametrize("ranks", [None, 3])
def test_world_tests_run_under_plain_pytest_and_under_mpiexec(tmp_path, ranks, request):
    if ranks is None:  # each world test spawned its ranks
        status, output, _ = run(tmp_path, {WORLD: examples.WORLD}, ranks, "-rA")
        assert status == 1, output
        assert f"PASSED {WORLD}::test_three_ranks" in output, output
        assert f"FAILED {WORLD}::test_fails_on_rank_1" in output, output
        assert "rank 1: AssertionError: rank 1 is not rank 0" in output, output
        assert "1 failed, 2 passed" in output, output
    else:  # the world of 3 runs test_three_ranks; the world(2) test is skipped
        status, output, logs = request.getfixturevalue("three_ranks")
        assert f"PASSED {WORLD}::test_three_ranks" in output, output
        assert f"PASSED {WORLD}::test_plain" in output, output
        assert not re.search(rf"(FAILED|ERROR) {WORLD}", output), output
        assert "world(2) runs in 2 ranks; this run has 3" in output, output
        for log in logs.values():
            assert outcome(log, WORLD, "test_three_ranks").startswith(
                f"{WORLD}::test_three_ranks call: passed"), log
