"""`@pytest.mark.world(n)` under plain `pytest`: the test runs in n freshly spawned ranks.

The test is run by `mpiexec -n n python -m pytest <its node id>` from the same environment
(the mpiexec beside this Python, else the one on PATH), in the run's root directory, with
pytest's result passed back: passed, skipped, or failed with the ranks' output. The ranks
run it with mpigrad's plugin active, so a failure on one of them fails it on all. The
launch is bounded by the test's timeout plus a minute for starting up; past that the ranks
are killed and the test fails.
"""
import os
import shutil
import signal
import subprocess
import sys
from importlib import metadata

import pytest
from _pytest.reports import TestReport

from ..launchers import launcher_variables

_START_UP_SECONDS = 60.0
_SHOWN_LINES = 200


def ranks_of(item):
    """n of the item's `world(n)` mark, or None without one."""
    marker = item.get_closest_marker("world")
    if marker is None:
        return None
    n = marker.args[0] if marker.args else marker.kwargs.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.world(n) takes the number of "
                                f"ranks, a positive int, got {n!r}")
    return n


def run_in_world(item, n, seconds):
    """Run `item` in a world of `n` spawned ranks; report it as pytest would have."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    outcome, longrepr, output = _launch(item, n, seconds)
    report = TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome,
                        longrepr, "call", [("output of the ranks", output)] if output else [])
    item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _launch(item, n, seconds):
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or \
        shutil.which("mpiexec")
    if mpiexec is None:
        return "failed", (f"@pytest.mark.world({n}): no mpiexec beside {sys.executable} or "
                          f"on PATH to start the ranks with"), ""
    config = item.config
    command = [mpiexec, "-n", str(n), sys.executable, "-m", "pytest", item.nodeid, "-q",
               "-p", "no:cacheprovider", "--mpi-timeout", repr(seconds)]
    if not _installed_as_entry_point():  # loaded with -p: the ranks need it too
        command[6:6] = ["-p", "mpigrad.testing.plugin"]
    environment = {k: v for k, v in os.environ.items() if k not in launcher_variables()}
    environment.setdefault("PYTHONUNBUFFERED", "1")
    environment.setdefault("OMP_NUM_THREADS", "1")
    limit = seconds + _START_UP_SECONDS
    process = subprocess.Popen(command, cwd=config.rootpath, env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return "failed", (f"@pytest.mark.world({n}): the ranks did not finish within {limit:g} "
                          f"s (the test's timeout, {seconds:g} s, and {_START_UP_SECONDS:g} s "
                          f"to start); killed. Their output:\n{_tail(output)}"), ""
    if process.returncode == 0:
        skipped = " skipped" in output and " passed" not in output
        if skipped:
            reason = next((line for line in output.splitlines() if "SKIP" in line), "skipped")
            return "skipped", (str(item.path), item.location[1] or 0, reason), output
        return "passed", None, ""
    verdicts = sorted({line for line in output.splitlines()
                       if line.startswith(("FAILED ", "ERROR "))})
    return "failed", "\n".join(verdicts + [
        f"@pytest.mark.world({n}): `{' '.join(command)}` exited with {process.returncode}. "
        f"The ranks' output:", _tail(output)]), ""


def _installed_as_entry_point():
    return any(ep.value.startswith("mpigrad.testing")
               for ep in metadata.entry_points(group="pytest11"))


def _tail(output):
    lines = output.splitlines()
    if len(lines) > _SHOWN_LINES:
        lines = [f"... ({len(lines) - _SHOWN_LINES} lines before)"] + lines[-_SHOWN_LINES:]
    return "\n".join(lines)
