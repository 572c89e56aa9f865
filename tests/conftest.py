"""Fixtures shared by the folders whose tests talk MPI (distributed/, parallel/)."""
import pytest


@pytest.fixture(scope="session")
def process_group():
    """The default process group, started once per session unless something else did."""
    import mpigrad.distributed as dist  # importing it initialises MPI, so only when needed
    mine = not dist.is_initialized()
    if mine:
        dist.init_process_group()
    yield dist.group.WORLD
    if mine and dist.is_initialized():
        dist.destroy_process_group()


# Looked up per test: a test of init/destroy may have replaced the default group.
@pytest.fixture
def rank(process_group):
    import mpigrad.distributed as dist
    return dist.get_rank()


@pytest.fixture
def size(process_group):
    import mpigrad.distributed as dist
    return dist.get_world_size()
