"""Shared set-up for the communication-layer tests.

Run serially (`pytest`, a world of one process) and under MPI
(`mpiexec -n 2|3 python -m pytest --with-mpi tests/distributed`). Tests marked
`mpi(min_size=2)` only run under MPI. Every rank runs the same tests in the same order, so a
test must never skip on some ranks only. Inputs are generated from a seed per rank, so each
rank can also build every other rank's input and compute the expected result in numpy
(see _helpers).
"""
import pytest

import mpigrad as mg
import mpigrad.distributed as dist


@pytest.fixture(scope="session", autouse=True)
def process_group():
    started_here = not dist.is_initialized()
    if started_here:
        dist.init_process_group()
    yield
    if started_here and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def rank():
    return dist.get_rank()


@pytest.fixture
def size():
    return dist.get_world_size()


@pytest.fixture(params=["ndarray", "Tensor"])
def wrap(request):
    """Pass arrays to the collectives as they are, or as Tensors sharing their memory (so the
    test can read the result from the array either way)."""
    if request.param == "ndarray":
        return lambda a: a
    return mg.from_numpy
