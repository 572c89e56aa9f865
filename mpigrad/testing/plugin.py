"""mpigrad's pytest plugin (the `pytest11` entry point "mpigrad"), for users' suites as well
as mpigrad's own.

Under an MPI launcher with more than one rank (`mpiexec -n 2 python -m pytest ...`) it keeps
the ranks in step (see `isolation`): the same tests on every rank, no collective pairing
with another test's, a test failed on every rank when it failed on one, a per-test timeout
(`--mpi-timeout SECONDS`, default 300; `@pytest.mark.mpi_timeout(seconds)`), a summary of
every rank's outcomes on rank 0, and each rank's reports in `--mpi-logs DIR`.
`--no-mpi-isolation` (or `-p no:mpigrad`) turns that off.

Always: `@pytest.mark.world(n)` (see `world`), and the fixtures `process_group` (the
default group, started once per session unless something else did) and `shared_tmp_path`
(one temporary directory, the same on every rank).

Nothing here imports mpigrad.distributed or mpi4py unless pytest runs under an MPI launcher:
a plain `pytest` never starts MPI.
"""
import os

import pytest

from ..launchers import mpi_launcher
from . import world

_ISOLATION = "mpigrad-isolation"
DEFAULT_TIMEOUT = 300.0  # seconds a test may run under mpiexec (--mpi-timeout)


def pytest_addoption(parser):
    group = parser.getgroup("mpigrad", "mpigrad: tests under mpiexec")
    group.addoption("--no-mpi-isolation", action="store_true",
                    help="under mpiexec, run each rank's tests on its own, without mpigrad's "
                         "test isolation, outcome agreement and per-test timeout")
    group.addoption("--mpi-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                    help="fail a test on every rank once it has run this long (default 300; "
                         "@pytest.mark.mpi_timeout(seconds) sets one test's)")
    group.addoption("--mpi-logs", metavar="DIR",
                    help="write each rank's reports, with the tests' captured output, to "
                         "DIR/rank-<r>.log")


def pytest_configure(config):
    config.addinivalue_line("markers", "world(n): run the test in n ranks; under plain pytest "
                                       "they are spawned with mpiexec")
    config.addinivalue_line("markers", "mpi_timeout(seconds): fail the test on every rank "
                                       "once it has run this long under mpiexec")
    if _world_size() > 1 and not config.getoption("no_mpi_isolation"):
        from .isolation import Isolation  # not at the top: it starts MPI
        config.pluginmanager.register(_Hooks(Isolation()), _ISOLATION)


def _world_size():
    """The number of ranks pytest runs in: 1 without an MPI launcher (MPI is not started)."""
    if mpi_launcher() is None:
        return 1
    import mpigrad.distributed  # noqa: F401  not at the top: it starts MPI, as mpigrad does
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_size()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under a launcher, a world(n) test runs in a world of n ranks, and is skipped in one of
    another size; under pytest-mpi's --only-mpi it counts as an MPI test."""
    if mpi_launcher() is None:
        return
    size = _world_size()
    only_mpi = config.getoption("--only-mpi", default=False)
    for item in items:
        n = world.ranks_of(item)
        if n is None:
            continue
        if only_mpi and item.get_closest_marker("mpi") is None:
            item.add_marker(pytest.mark.mpi(min_size=n))
        if n != size:
            item.add_marker(pytest.mark.skip(reason=f"@pytest.mark.world({n}) runs in {n} ranks; "
                                                    f"this run has {size}"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    n = world.ranks_of(item)
    if n is None or mpi_launcher() is not None:
        return None
    world.run_in_world(item, n, item.config.getoption("mpi_timeout"))
    return True


class _Hooks:
    """The hooks active under a launcher with several ranks."""

    def __init__(self, isolation):
        self.isolation = isolation
        self.log = None
        self.by_rank = None  # every rank's outcomes, on rank 0 at the end

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        self.isolation.check_collection(session.items)
        logs = session.config.getoption("mpi_logs")
        if logs:
            os.makedirs(logs, exist_ok=True)
            self.log = open(os.path.join(logs, f"rank-{self.isolation.rank}.log"), "w")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """pytest's protocol, with the reports logged once the ranks agreed on them."""
        if item.nodeid in self.isolation.skipped_everywhere:
            return None
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in self.isolation.run(item, nextitem):
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        return (yield from self.isolation.scoped(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        return (yield from self.isolation.scoped(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        return (yield from self.isolation.scoped(item, "teardown"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        self.isolation.made(report)
        return report

    def pytest_runtest_logreport(self, report):
        self.isolation.note(report)
        if self.log is not None and (report.when == "call" or not report.passed):
            self.log.write(f"{report.nodeid} {report.when}: {report.outcome}\n")
            if report.longrepr is not None:
                self.log.write(report.longreprtext + "\n")
            for title, text in report.sections:
                self.log.write(f"---- {title}\n{text}\n")
            self.log.flush()

    def pytest_sessionfinish(self, session):
        self.by_rank = self.isolation.gather_outcomes()
        if self.log is not None:
            self.log.close()

    def pytest_terminal_summary(self, terminalreporter):
        if self.by_rank is None or not any(self.by_rank):
            return
        write = terminalreporter.write_line
        terminalreporter.section("mpigrad: outcomes on every rank")
        for r, outcomes in enumerate(self.by_rank):
            counts = {}
            for outcome in outcomes.values():
                counts[outcome] = counts.get(outcome, 0) + 1
            write(f"rank {r}: " + (", ".join(f"{count} {outcome}" for outcome, count
                                             in sorted(counts.items())) or "no tests run"))
        for nodeid, when, text in self.isolation.failed_phases:
            write(f"{nodeid}: {text}")
        logs = terminalreporter.config.getoption("mpi_logs")
        if logs:
            write(f"each rank's reports and output: {os.path.abspath(logs)}/rank-<r>.log")


@pytest.fixture(scope="session")
def process_group():
    """The default process group, started once per session unless something else did (and
    then destroyed at the end of the session)."""
    import mpigrad.distributed as dist  # not at the top: importing it may start MPI
    mine = not dist.is_initialized()
    if mine:
        dist.init_process_group()
    yield dist.group.WORLD
    if mine and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def shared_tmp_path(tmp_path_factory, request):
    """A new temporary directory, the same one on every rank (under rank 0's temporary
    directory: on one node, or on a file system the nodes share)."""
    hooks = request.config.pluginmanager.get_plugin(_ISOLATION)
    if hooks is None:
        return tmp_path_factory.mktemp(request.node.name[:30])
    return hooks.isolation.shared_directory(request.node)
