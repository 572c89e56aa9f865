"""Keeping the ranks of a pytest run under mpiexec in one test at a time, and of one outcome.

Every rank runs the same tests in the same order (checked at the start: `check_collection`).
A test's setup and call run in one watchdog test scope, its teardown in another: a rank that
leaves a scope early (it failed or skipped) tells the others, whose waiting and later
collectives and messages in the scope then raise at once, naming the rank and where it left
(a rank that finished tells no one: the others may still need its RPC agent); past the
test's timeout every rank raises, naming where each rank was (see
`mpigrad.distributed.fault.watchdog`, "Test scopes").

The ranks agree once per test, after teardown (`Isolation._agree`): pytest's protocol runs
with its reports held back (`Isolation.run`), and they are logged once the ranks agreed. When
every rank passed alike that is one nonblocking Allreduce of two integers; when not, the ranks
exchange each phase's outcome and first line, a phase that failed on any rank fails on all of
them, and one skipped on some ranks only is an error. A test that did not pass alike may have
left requests unmatched, so the process groups then move to fresh communicators
(`ProcessGroup._renew`) before the next test; and before teardown's first watched call, if
setup or call did not pass alike, so that teardown's collectives (an RPC shutdown, a group's
destruction) still work. Whether they did is a second Allreduce, started as teardown begins
and waited for only there or at the test's end, where every rank is anyway.

Waits for agreements sleep between tries rather than spin (`watchdog.wait_politely`): the
ranks of a suite usually outnumber the cores, and a spinning rank delays the one it waits for.
Measured cost: see docs/testing.md ("What the plugin costs").

A test that every rank skips at collection (pytest-mpi's marks, an `mpi(min_size=k)` larger
than the world) runs no scope and no agreement.
"""
import os
import pathlib
import re
import shutil
import tempfile
import time
import zlib

import numpy as np
import pytest
from mpi4py import MPI

from _pytest.runner import runtestprotocol

from ..distributed import process_group
from ..distributed.fault import watchdog

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # mpigrad/
_PASSED, _FAILED, _SKIPPED = 0, 1, 2
_PHASES = ("setup", "call", "teardown")


class Isolation:
    """The plugin's state on one rank of a run of several (registered by `plugin`)."""

    def __init__(self):
        # The plugin's own communicators: `comm` for agreements, `parent` for the groups'
        # renewed communicators (see _renew_groups), the third for the scopes' messages.
        self.comm = MPI.COMM_WORLD.Dup()
        self.parent = MPI.COMM_WORLD.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        watchdog.open_scopes(MPI.COMM_WORLD.Dup())
        # Shared temporary directories go under one that rank 0 makes now and removes at the
        # end: the tests' are then named without communicating (see shared_directory).
        self.shared_root = pathlib.Path(self.comm.bcast(
            tempfile.mkdtemp(prefix="mpigrad-shared-") if self.rank == 0 else None))
        self.scope_number = 0
        self.test = None  # the _Test running now
        self.skipped_everywhere = set()
        self.outcomes = {}     # nodeid -> this rank's worst outcome ("failed" over the others)
        self.failed_phases = []  # (nodeid, when, every rank's outcome) of phases failed anywhere

    # ------------------------------------------------------------------ collection
    def check_collection(self, items):
        """Raise pytest.UsageError on every rank unless every rank collected the same tests in
        the same order (with the same ones skipped at collection) and every test's timeout
        is a positive number."""
        for item in items:
            _timeout(item)
        self.skipped_everywhere = {item.nodeid for item in items if _skipped_at_collection(item,
                                                                                      self.size)}
        listing = [f"{item.nodeid}{' (skipped)' * (item.nodeid in self.skipped_everywhere)}"
                   for item in items]
        digest = zlib.crc32("\n".join(listing).encode())
        if _same_everywhere(self.comm, digest):
            return
        listings = self.comm.allgather(listing)
        lines = []
        for r, other in enumerate(listings):
            if other == listings[0]:
                continue
            position = next((i for i, (a, b) in enumerate(zip(listings[0], other)) if a != b),
                            min(len(listings[0]), len(other)))
            mine = listings[0][position] if position < len(listings[0]) else "(the end)"
            theirs = other[position] if position < len(other) else "(the end)"
            lines.append(f"rank {r} collected {len(other)} tests, rank 0 {len(listings[0])}; "
                         f"test #{position + 1} is {theirs} on rank {r}, {mine} on rank 0")
        raise pytest.UsageError(
            "mpigrad.testing: the ranks collected different tests, so they would run different "
            "collectives and wait for each other forever:\n  " + "\n  ".join(lines) +
            "\nEvery rank must collect the same tests (no test defined, parametrized or "
            "deselected differently on some ranks).")

    # ------------------------------------------------------------------ one test
    def run(self, item, nextitem):
        """Run `item` as pytest does (setup, call unless setup did not pass, teardown) with
        nothing logged yet, in its scopes (see `scoped`); then agree once on the outcome.
        Returns the reports to log, made the ranks' common outcome."""
        self.test = _Test(item)
        try:
            reports = runtestprotocol(item, log=False, nextitem=nextitem)
        finally:
            test, self.test = self.test, None
        return self._agree(item, test, reports)

    def scoped(self, item, when):
        """A phase hook wrapper's body. Setup and call share one scope; teardown has its own,
        whose first watched call first learns whether the others ran setup and call through
        (see `_settle`), so that it runs on fresh communicators if not."""
        test = self.test
        if test is None:  # skipped everywhere at collection: pytest's own protocol runs it
            return (yield)
        if when == "setup":
            self._enter(test, "setup", test.deadline)
        elif when == "call":
            watchdog.set_phase("call")
        else:
            self._begin_teardown(test)
        where = None
        try:
            return (yield)
        except BaseException as exc:
            where = _where(exc)
            raise
        finally:
            if where is not None or when != "setup":
                watchdog.leave_scope(where)

    def _enter(self, test, phase, deadline=None, gate=None):
        self.scope_number += 1
        watchdog.enter_scope(test.item.nodeid, self.scope_number, phase, test.seconds,
                             deadline, gate)

    def _begin_teardown(self, test):
        """Leave setup and call's scope (if no phase left it early), start the agreement on
        whether they passed everywhere, and enter teardown's scope, with a timeout of its own
        (teardown after a test that timed out must still get to run)."""
        watchdog.leave_scope()
        codes = [report_code(test.reports, "setup"), report_code(test.reports, "call")]
        test.before_teardown = _start_agreement(self.comm, _encode(codes))
        self._enter(test, "teardown", gate=lambda: self._settle(test))

    def made(self, report):
        if self.test is not None:
            self.test.reports.append(report)

    def _settle(self, test):
        """Once per test, before teardown's first watched call or at the test's end: wait
        for the agreement on setup and call; if they did not pass alike everywhere, requests
        may be left unmatched, so every group moves to fresh communicators first."""
        if test.settled:
            return
        request, bounds = test.before_teardown
        watchdog.wait_politely([request])  # may raise: the test's end settles it then
        test.settled = True
        if not _all_passed_alike(bounds):
            self._renew_groups()

    def shared_directory(self, item):
        """A new directory for `item`, the same on every rank (named by the scope number,
        which every rank has counted alike)."""
        name = re.sub(r"[^\w.-]", "_", item.name)[:40]
        path = self.shared_root / f"{self.scope_number}-{name}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ------------------------------------------------------------------ agreement
    def _agree(self, item, test, reports):
        """Make `reports` (this rank's, for the test's phases) the ranks' common outcome: one
        nonblocking Allreduce of a few integers when every rank passed alike; when not, the
        ranks exchange each phase's outcome and first line: a phase that failed on any rank
        fails on all, and one skipped on some ranks only is an error."""
        codes = [report_code(reports, when) for when in _PHASES]
        final = _start_agreement(self.comm, _encode(codes))
        if test.before_teardown is not None:  # None: an error in pytest itself before it
            self._settle(test)  # ranks that made no watched call in teardown renew here
        watchdog.wait_politely([final[0]])
        if _all_passed_alike(final[1]):
            return reports
        everyone = self.comm.allgather([(r.when, report_code(reports, r.when), _first_line(r))
                                        for r in reports])
        by_phase = [{r: {when: (code, line) for when, code, line in phases}[phase]
                     for r, phases in enumerate(everyone)
                     if any(when == phase for when, _, _ in phases)} for phase in _PHASES]
        kept = []
        setup_eventful = False
        for report in reports:
            outcomes = by_phase[_PHASES.index(report.when)]
            if report.when == "call" and setup_eventful:
                # Setup did not pass on every rank, so pytest would not have run the call:
                # this rank's call shows only if it failed.
                if report.failed:
                    kept.append(report)
                continue
            text = self._common_outcome(item, report, outcomes)
            if text is not None and report.when == "setup":
                setup_eventful = True
            kept.append(report)
        if any(code != _PASSED for code, _ in by_phase[2].values()):
            self._renew_groups()  # teardown too may have left requests unmatched
        return kept

    def _common_outcome(self, item, report, outcomes):
        """Fail `report` unless its phase passed alike on every rank (`outcomes`: rank ->
        (code, first line)); returns the text that says so, or None."""
        failed = [r for r, (c, _) in sorted(outcomes.items()) if c == _FAILED]
        skipped = [r for r, (c, _) in sorted(outcomes.items()) if c == _SKIPPED]
        if failed:
            text = (f"{report.when} failed on {_ranks(failed)} of {self.size}:\n"
                    + "\n".join(f"  rank {r}: {outcomes[r][1]}" for r in failed))
        elif skipped and len(skipped) < len(outcomes):
            text = (f"{report.when} skipped on {_ranks(skipped)} but not on "
                    f"{_ranks([r for r in sorted(outcomes) if r not in skipped])}: a test must "
                    f"be skipped on every rank or on none\n"
                    + "\n".join(f"  rank {r}: {outcomes[r][1]}" for r in skipped))
        else:
            return None
        self.failed_phases.append((item.nodeid, report.when, text))
        if report.failed:
            report.sections.append(("mpigrad: every rank's outcome", text))
        else:
            report.outcome, report.longrepr = "failed", f"mpigrad.testing: {text}"
            if hasattr(report, "wasxfail"):  # an xfail passing here failed elsewhere
                del report.wasxfail
        return text

    def _renew_groups(self):
        for pg in list(process_group._live_groups):
            pg._renew(self.parent)
        watchdog.forget_abandoned_calls()

    # ------------------------------------------------------------------ summary
    def note(self, report):
        previous = self.outcomes.get(report.nodeid)
        if report.failed or previous is None or (previous == "passed" and report.skipped):
            self.outcomes[report.nodeid] = "failed" if report.failed else report.outcome

    def gather_outcomes(self):
        """Every rank's {nodeid: outcome}, on rank 0 (None elsewhere); collective, at the end:
        the shared temporary directories go too."""
        by_rank = self.comm.gather(self.outcomes, root=0)
        if self.rank == 0:
            shutil.rmtree(self.shared_root, ignore_errors=True)
        return by_rank


def _skipped_at_collection(item, size):
    if item.get_closest_marker("skip") is not None:
        return True
    mpi = item.get_closest_marker("mpi")
    return mpi is not None and mpi.kwargs.get("min_size", 0) > size


def _timeout(item):
    marker = item.get_closest_marker("mpi_timeout")
    if marker is not None:
        seconds = marker.args[0] if marker.args else marker.kwargs.get("seconds")
    else:
        seconds = item.config.getoption("mpi_timeout")
    if not isinstance(seconds, (int, float)) or not seconds > 0:
        raise pytest.UsageError(f"{item.nodeid}: the test timeout must be a positive number of "
                                f"seconds, got {seconds!r}")
    return float(seconds)


def _same_everywhere(comm, value):
    bounds = np.array([value, -value], np.int64)
    comm.Allreduce(MPI.IN_PLACE, bounds, MPI.MAX)
    return bounds[0] == -bounds[1]


class _Test:
    """The test running now: its setup and call's deadline, and the agreement on them."""

    def __init__(self, item):
        self.item = item
        self.seconds = _timeout(item)  # checked at collection
        self.deadline = time.monotonic() + self.seconds
        self.reports = []  # as made (runtestprotocol returns them only at the end)
        self.before_teardown = None  # (request, bounds) once teardown began
        self.settled = False


def report_code(reports, when):
    """How phase `when` ended in `reports`: _PASSED also when it did not run here."""
    for report in reports:
        if report.when == when:
            return _FAILED if report.failed else _SKIPPED if report.skipped else _PASSED
    return _PASSED


def _encode(codes):
    """Phases' codes as one number, equal on two ranks exactly when their phases ended
    alike."""
    return sum(code << (2 * i) for i, code in enumerate(codes))


def _start_agreement(comm, value):
    """Start the Allreduce whose result `_all_passed_alike` reads: (request, bounds)."""
    bounds = np.array([value, -value], np.int64)
    return comm.Iallreduce(MPI.IN_PLACE, bounds, MPI.MAX), bounds


def _all_passed_alike(bounds):
    """Whether every rank's phases ended alike (the same value everywhere), none failed."""
    value = int(bounds[0])
    return value == -bounds[1] and all((value >> (2 * i)) & 3 != _FAILED
                                       for i in range(len(_PHASES)))


def _where(exc):
    """Where and why a phase ended with `exc`, as the other ranks' errors quote it."""
    if isinstance(exc, pytest.skip.Exception):
        return f"skipped ({exc.msg})"
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    site = "" if tb is None else f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}: "
    message = str(exc).strip().splitlines()
    return f"at {site}{type(exc).__name__}{': ' + message[0] if message else ''}"


def _first_line(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        return f"skipped: {report.longrepr[2].removeprefix('Skipped: ')}"
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        message = crash.message.strip().splitlines()
        first = message[0] if message else "?"
        if crash.path.startswith(_PACKAGE):  # raised by mpigrad for a reason the line names
            return first
        return f"{first} ({crash.path}:{crash.lineno})"
    text = str(report.longrepr or report.outcome).strip().splitlines()
    return text[0] if text else report.outcome


def _ranks(ranks):
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
