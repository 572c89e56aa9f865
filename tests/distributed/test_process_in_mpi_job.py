"""A multiprocessing child of a rank of an mpiexec job (spawned, or through the forkserver)
starts as an MPI world of its own if it initialises MPI, instead of claiming its parent's
rank: MPI_Init used to fail in it and end the job. The ranks go on together afterwards."""
import os
import pathlib

import pytest

import mpigrad.multiprocessing as mp

pytestmark = pytest.mark.mpi(min_size=2)


def _child(results):
    import mpigrad.distributed  # noqa: F401  (what a child's script would import)
    from mpi4py import MPI
    if not MPI.Is_initialized():
        MPI.Init()
    results.put((MPI.COMM_WORLD.Get_size(),
                 sorted(name for name in os.environ if name.startswith("PMI_"))))


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_process_child_of_a_rank_is_a_world_of_its_own(process_group, method, monkeypatch):
    import mpigrad.distributed as dist
    # The child imports this module by its name under tests/, which spawn's sys.path needs.
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parent.parent))
    assert any(name.startswith("PMI_") for name in os.environ)  # a rank the launcher placed
    context = mp.get_context(method)
    results = context.Queue()
    child = context.Process(target=_child, args=(results,))
    child.start()
    size, launcher_variables = results.get(timeout=30)
    child.join(120)
    assert (size, launcher_variables, child.exitcode) == (1, [], 0)
    assert dist.get_world_size() >= 2
    dist.barrier()  # the job is whole after the children have come and gone
