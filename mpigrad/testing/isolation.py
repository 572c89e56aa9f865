"""Keeping the ranks of a pytest run under mpiexec in one test at a time, and of one outcome.

Every rank runs the same tests in the same order (checked at the start: `check_collection`).
Each phase of a test (setup, call, teardown) runs in a watchdog test scope: a rank that
leaves the phase early (it failed or skipped) tells the others, whose waiting and later
collectives and messages in the phase then raise at once, naming the rank and where it left
(a rank that finished tells no one: the others may still need its RPC agent);
past the test's timeout every rank raises, naming where each rank was (see
`mpigrad.distributed.fault.watchdog`, "Test scopes"). Then the ranks agree on the phase's
outcome (`agree`): one Allreduce of two integers when every rank passed; when not, they
exchange one line each, a failure on any rank fails the phase on all of them, and a skip on
some ranks only is an error. After such a phase the process groups move to fresh
communicators (`ProcessGroup._renew`), so requests the phase left unmatched cannot pair with
the next test's.

A test that every rank skips at collection (pytest-mpi's marks, an `mpi(min_size=k)` larger
than the world) runs no scope and no agreement.
"""
import os
import pathlib
import re
import shutil
import tempfile
import zlib

import numpy as np
import pytest
from mpi4py import MPI

from ..distributed import process_group
from ..distributed.fault import watchdog

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # mpigrad/
_PASSED, _FAILED, _SKIPPED = 0, 1, 2


class Isolation:
    """The plugin's state on one rank of a run of several (registered by `plugin`)."""

    def __init__(self):
        # The plugin's own communicators: `comm` for agreements (and, carrying nothing else
        # between them, the parent of renewed groups); `scopes` for the scopes' messages.
        self.comm = MPI.COMM_WORLD.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        watchdog.open_scopes(MPI.COMM_WORLD.Dup())
        # Shared temporary directories go under one that rank 0 makes now and removes at the
        # end: the tests' are then named without communicating (see shared_directory).
        self.shared_root = pathlib.Path(self.comm.bcast(
            tempfile.mkdtemp(prefix="mpigrad-shared-") if self.rank == 0 else None))
        self.scope_number = 0
        self.skipped_everywhere = set()
        self.outcomes = {}     # nodeid -> this rank's worst outcome ("failed" over the others)
        self.failed_phases = []  # (nodeid, when, every rank's outcome) of phases failed anywhere

    # ------------------------------------------------------------------ collection
    def check_collection(self, items):
        """Raise pytest.UsageError on every rank unless every rank collected the same tests in
        the same order (with the same ones skipped at collection)."""
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

    # ------------------------------------------------------------------ scopes
    def scoped(self, item, when):
        """A hook wrapper's body: run the phase in a test scope, then leave it."""
        if item.nodeid in self.skipped_everywhere:
            return (yield)
        self.scope_number += 1
        watchdog.enter_scope(f"{item.nodeid} ({when})", self.scope_number, _timeout(item))
        where = None
        try:
            return (yield)
        except BaseException as exc:
            where = _where(exc)
            raise
        finally:
            watchdog.leave_scope(where)

    def shared_directory(self, item):
        """A new directory for `item`, the same on every rank (named by the scope number,
        which every rank has counted alike)."""
        name = re.sub(r"[^\w.-]", "_", item.name)[:40]
        path = self.shared_root / f"{self.scope_number}-{name}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ------------------------------------------------------------------ agreement
    def agree(self, item, report):
        """Make `report` (this rank's, for one phase) the ranks' common outcome."""
        if item.nodeid in self.skipped_everywhere:
            return
        code = _FAILED if report.failed else _SKIPPED if report.skipped else _PASSED
        if _same_everywhere(self.comm, code) and code != _FAILED:
            return
        lines = self.comm.allgather((code, _first_line(report)))
        failed = [r for r, (c, _) in enumerate(lines) if c == _FAILED]
        skipped = [r for r, (c, _) in enumerate(lines) if c == _SKIPPED]
        if failed:
            text = (f"{report.when} failed on {_ranks(failed)} of {self.size}:\n"
                    + "\n".join(f"  rank {r}: {lines[r][1]}" for r in failed))
        else:
            text = (f"{report.when} skipped on {_ranks(skipped)} but not on "
                    f"{_ranks([r for r in range(self.size) if r not in skipped])}: a test must "
                    f"be skipped on every rank or on none\n"
                    + "\n".join(f"  rank {r}: {lines[r][1]}" for r in skipped))
        self.failed_phases.append((item.nodeid, report.when, text))
        if report.failed:
            report.sections.append(("mpigrad: every rank's outcome", text))
        else:
            report.outcome, report.longrepr = "failed", f"mpigrad.testing: {text}"
            if hasattr(report, "wasxfail"):  # an xfail passing here failed elsewhere
                del report.wasxfail
        self._renew_groups()

    def _renew_groups(self):
        for pg in list(process_group._live_groups):
            pg._renew(self.comm)
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
