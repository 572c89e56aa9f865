"""The environment for processes the tests start as jobs or ranks of their own. Apart from
_helpers so that it imports no MPI: tests/multiprocessing/test_multiprocessing.py, whose process stays free
of MPI, uses it too."""
import os
import pathlib

from mpigrad.launchers import launcher_variables


def launcher_free_environment(**extra):
    """os.environ without any launcher's variables (what a launcher, or a parent test under
    mpiexec, left there) and the rendezvous settings, with the repository on PYTHONPATH and
    `extra` added: for processes the tests start as separately launched ranks, which must not
    look placed by a launcher."""
    placed = set(launcher_variables())
    env = {k: v for k, v in os.environ.items()
           if k not in placed and not k.startswith("MPIGRAD_RENDEZVOUS")}
    repo = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, env.get("PYTHONPATH")]))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def job_environment(**extra):
    """launcher_free_environment with one BLAS thread per process, and `extra`: for the MPI
    jobs the tests start under their own mpiexec, several ranks to a small machine. Run under
    mpiexec itself, a test would otherwise pass its launcher's variables on, and the job's
    ranks would try to join the test's job instead of starting their own."""
    return launcher_free_environment(**{"OMP_NUM_THREADS": 1, "OPENBLAS_NUM_THREADS": 1,
                                        **extra})
