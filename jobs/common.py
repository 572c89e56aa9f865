"""What the training jobs share: argument types and the text jobs' common options, the
standard library's sources as training text, rank-0 logging, means over every rank, the
agreed stop on a signal (preemption), the checkpoint directory check, the end of a run, and
the parameter-server examples' options and roles. Import it as `common` (the jobs run from
this folder, which Python puts first on sys.path)."""
import argparse
import glob
import os
import sysconfig
import signal
import tempfile

import numpy as np

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.rpc as rpc
from mpigrad.serialization import remove_stale_temporaries

# The exit code of a job stopped by SIGUSR1/SIGTERM after checkpointing: requeue me.
PREEMPTED_EXIT_CODE = 99


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def add_text_job_arguments(p, seeds):
    """--text, --dtype and --seed, as the language-model jobs take them; `seeds` says what
    the seed draws."""
    p.add_argument("--text", metavar="FILE", default=None,
                   help="train on this text file (default: the Python standard library's "
                        "sources)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="parameter dtype (default float32)")
    p.add_argument("--seed", type=int, default=0, help=f"seed for {seeds}")


def text_files(args):
    """--text, or the running interpreter's standard library sources in name order: real
    text on every machine, offline."""
    if args.text:
        return [args.text]
    return sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))


def use_dtype(args):
    """Make --dtype the default dtype of the parameters the job is about to create."""
    mg.set_default_dtype(getattr(mg, args.dtype))


def log(rank, message):
    if rank == 0:
        print(f"[rank {rank}] {message}", flush=True)


def mean_over_ranks(total, count):
    """sum(total) / sum(count) over every rank: a mean over all ranks' samples, whatever
    each rank's share."""
    both = np.array([total, count], dtype=np.float64)
    dist.all_reduce(both)
    return both[0] / both[1]


def finish(rank, summary):
    """Every rank waits for the others (rank 0 may have saved or sampled), then rank 0 says
    the run ended."""
    dist.barrier()
    log(rank, f"training finished: {summary}")
    return 0


class StopFlag:
    """Set by SIGUSR1/SIGTERM; ranks agree on it once per step so they stop together."""

    def __init__(self):
        self.local = np.zeros(1, np.int64)
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.local[0] = 1

    def agreed(self):
        flag = self.local.copy()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag[0])


def check_checkpoint_directory(directory, rank):
    """Create `directory` and prove rank 0 can write there, before any training is spent;
    also remove the temporaries of saves that were killed. Every rank learns the outcome."""
    problem = [None]
    if rank == 0:
        try:
            os.makedirs(directory, exist_ok=True)
            remove_stale_temporaries(directory)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
                pass
        except OSError as err:
            problem[0] = (f"checkpoint directory {directory} is not writable ({err}); choose "
                          "another --checkpoint DIR or fix its permissions")
    dist.broadcast_object_list(problem)
    return problem[0]


def parameter_server_arguments(doc):
    """The options both parameter-server examples take."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--train-samples", type=int, default=6000)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    return p


def run_server_and_trainers(script, train, args):
    """Rank 0 is the parameter server "ps" and serves; every other rank is a trainer and
    runs `train(args, rank, size)`; all stop together once every trainer is done."""
    # The process group first: the role depends on the rank, and in a process no launcher
    # started mpigrad.distributed leaves MPI to start there (a plain `python` is a world of
    # one, refused below, where asking mpi4py first would abort in MPICH).
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if size < 2:
        raise SystemExit(f"{script} needs at least 2 ranks (a server and a trainer): "
                         f"mpiexec -n 3 python jobs/{script}")
    rpc.init_rpc("ps" if rank == 0 else f"trainer{rank - 1}")
    if rank != 0:
        train(args, rank, size)
    rpc.shutdown()  # the server serves until every trainer is done
