"""Fixtures shared by the tests that talk MPI (tests/distributed, with DDP's in
tests/distributed/ddp), and how they run under MPI.

Every test in tests/distributed runs twice in `tests/run.sh`: serially (a world of one,
`python -m pytest`) and on 2 and 3 ranks (`mpiexec -n 2|3 python -m pytest --only-mpi`).
pytest-mpi's `--only-mpi` runs only tests marked `mpi`, so the hook below marks every test
there `mpi` under MPI (and deselects every test left unmarked); a test writes `mpi(min_size=k)` itself only when it needs k ranks, and
`mpi_skip` when it launches its own MPI jobs in a subprocess (those run in the serial step
only). A module there whose tests would all stay out of the MPI steps is a collection error,
so a multi-rank check cannot silently become a world-of-one check again.
"""
from pathlib import Path

import numpy as np
import pytest

import mpigrad as mg

MPI_FOLDER = Path(__file__).parent / "distributed"


def _in_mpi_folder(item):
    return MPI_FOLDER in item.path.parents


def _runs_on_several_ranks(item):
    """Whether the MPI steps run this test (and on every rank)."""
    return item.get_closest_marker("mpi_skip") is None


def pytest_ignore_collect(collection_path, config):
    """Under --only-mpi, a test file outside tests/distributed that never writes the `mpi`
    mark has nothing for the MPI steps: not imported at all, rather than collected and
    deselected (collecting the whole suite took each rank some 25 s of CPU, on 2 and 3
    ranks sharing 2 cores)."""
    if (config.getoption("--only-mpi") and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_")
            and MPI_FOLDER not in collection_path.parents
            and "mark.mpi" not in collection_path.read_text(encoding="utf-8")):
        return True
    return None


# tryfirst: pytest-mpi's own hook skips every test without the mark under --only-mpi.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    by_module = {}
    for item in items:
        if _in_mpi_folder(item):
            by_module.setdefault(item.path, []).append(item)
    serial_only = sorted(str(path) for path, module_items in by_module.items()
                         if not any(_runs_on_several_ranks(item) for item in module_items))
    if serial_only:
        raise pytest.UsageError(
            f"{', '.join(serial_only)}: every test is marked mpi_skip, so no test of the "
            "module runs on several ranks; tests under tests/distributed "
            "must run under mpiexec (see tests/conftest.py)")
    if config.getoption("--only-mpi"):
        for module_items in by_module.values():
            for item in module_items:
                if _runs_on_several_ranks(item) and item.get_closest_marker("mpi") is None:
                    item.add_marker(pytest.mark.mpi)
        # Deselected, not skipped as pytest-mpi would: reporting some 5,800 skips took each
        # rank about 12 s of an MPI step.
        serial = [item for item in items if item.get_closest_marker("mpi") is None]
        if serial:
            config.hook.pytest_deselected(items=serial)
            items[:] = [item for item in items if item.get_closest_marker("mpi") is not None]


# `process_group` (the default group, started once per session) is the fixture of mpigrad's
# own pytest plugin (mpigrad/testing/plugin.py), which installing mpigrad registers.


# Looked up per test: a test of init/destroy may have replaced the default group.
@pytest.fixture
def rank(process_group):
    import mpigrad.distributed as dist  # not at the top: importing it may start MPI
    return dist.get_rank()


@pytest.fixture
def size(process_group):
    import mpigrad.distributed as dist  # not at the top: importing it may start MPI
    return dist.get_world_size()


@pytest.fixture
def float64():
    """Run a test with float64 as the default dtype (gradient checks need it)."""
    previous = mg.get_default_dtype()
    mg.set_default_dtype(mg.float64)
    yield
    mg.set_default_dtype(previous)


@pytest.fixture
def rng():
    """A seeded numpy generator for a test's inputs (tests/nn's conftest seeds its own)."""
    return np.random.default_rng(1234)
