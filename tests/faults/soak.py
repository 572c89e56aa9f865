"""The soak: MPI jobs training with DDP, calling each other over RPC and checkpointing with
mpigrad.save/load, while a fault injector kills (-9), stops (SIGSTOP) and resumes (SIGCONT)
their ranks at random; the invariants are checked after every event.

    python tests/faults/soak.py --minutes 10            # 2- and 3-rank jobs, 5 minutes each
    python tests/faults/soak.py --minutes 1 --ranks 3 --seed 7

Each job (this file run under mpiexec with --job) trains until the driver asks it to stop,
so the event always lands in the middle of its work; one event per job, chosen in turn from
EVENTS in a seeded random order:

  kill          a random rank is killed with SIGKILL
  stop          a random rank is stopped with SIGSTOP and never resumed
  stop-resume   a random rank is stopped for less than the group's timeout, then resumed
  none          nothing happens

After every event, the invariants: the job ends within the group's timeout plus MARGIN (each
launch also runs under `timeout`, so a hang is reported, never waited for); a kill or a lasting
stop ends the job with an error, a short stop or nothing lets it finish cleanly on every rank;
no process of the job is left; no /dev/shm segment its ranks mapped is left; every checkpoint
file the job wrote is loadable and holds what was saved. tests/faults/test_soak.py runs it in
a short form.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

if __name__ == "__main__":  # run as a script (the driver, or a job's rank): tests.* importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.faults._processes import kill, start_waiting_job, survivors  # noqa: E402

EVENTS = ("kill", "stop", "stop-resume", "none")
TIMEOUT = 5        # seconds: the group's (and RPC's) timeout in the jobs
MARGIN = 20        # seconds beyond TIMEOUT for the launcher to tear the job down, on a busy machine
START_LIMIT = 120  # seconds for a job's ranks to start and build the model
JOB_LIMIT = START_LIMIT + 60  # `timeout` around each launch
SAVE_EVERY = 3     # steps between checkpoints
_STOP_FILE = "stop"


class InvariantBroken(AssertionError):
    pass


# ---------------------------------------------------------------------------- the job
def job(directory):
    """One rank of a job: DDP steps, an RPC call to the next rank and a checkpoint every
    SAVE_EVERY steps (each loaded back by the next save), until the driver's stop file
    appears (the ranks agree on the step at which they stop)."""
    import datetime

    import numpy as np

    import mpigrad as mg
    import mpigrad.distributed as dist
    import mpigrad.distributed.rpc as rpc
    from scenarios import model_and_data, train_step

    timeout = datetime.timedelta(seconds=TIMEOUT)
    dist.init_process_group(timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    # What the driver checks goes to a file of the rank's own: the launcher interleaves the
    # ranks' standard output, even within lines.
    report = open(os.path.join(directory, f"rank{rank}.txt"), "a", buffering=1)
    rpc.init_rpc(f"worker{rank}",
                 rpc_backend_options=rpc.MPIRpcBackendOptions(rpc_timeout=TIMEOUT))
    model, batches = model_and_data(rank)
    optimizer = mg.optim.SGD(model.parameters(), lr=0.01)
    for path in _shared_memory_mapped():
        print(f"SHM {path}", file=report)
    print(f"READY {rank} {os.getpid()}", file=report)
    stop = np.zeros(1)
    step, last_saved = 0, None
    while True:
        x, y = batches[step % len(batches)]
        train_step(model, optimizer, x, y)
        answer = rpc.rpc_sync(f"worker{(rank + 1) % world}", mg.add, args=(x, float(step)))
        np.testing.assert_array_equal(answer.numpy(), x.numpy() + step)
        if step % SAVE_EVERY == 0:
            if last_saved is not None:
                assert mg.load(last_saved)["step"] == step - SAVE_EVERY
            last_saved = os.path.join(directory, f"checkpoint-rank{rank}-step{step}.pt")
            mg.save({"step": step, "model": model.module.state_dict(),
                     "optimizer": optimizer.state_dict()}, last_saved)
            print(f"SAVED {last_saved}", file=report)
        stop[0] = os.path.exists(os.path.join(directory, _STOP_FILE))
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        step += 1
        if stop[0]:
            break
    rpc.shutdown()
    dist.destroy_process_group()
    print(f"END {rank} after {step} steps", file=report)


def _shared_memory_mapped():
    """The /dev/shm files this process maps (MPI's, DDP's shared buckets), named even once
    unlinked."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(maxsplit=5)[5].strip() for line in maps
                 if len(line.split(maxsplit=5)) == 6 and "/dev/shm/" in line}
    return sorted(path.removesuffix(" (deleted)") for path in paths)


# ---------------------------------------------------------------------------- the driver
class _Job:
    """A launched job: its output (read as it comes, so the pipe never fills) and what its
    ranks report in their files in `directory`."""

    def __init__(self, ranks, directory, marker):
        from tests.distributed._environment import job_environment
        self.ranks, self.directory, self.marker = ranks, directory, marker
        self.lines = []
        self.process = start_waiting_job(
            ["timeout", "-k", "5", str(JOB_LIMIT), shutil.which("mpiexec"), "-n", str(ranks),
             sys.executable, __file__, "--job", directory, marker],
            env=job_environment(MPIGRAD_STALL_SECONDS=1),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self.lines.extend, args=(self.process.stdout,),
                                         daemon=True)
        self._reader.start()

    def wait_until_ready(self, seconds):
        """Whether every rank has said READY within `seconds` (False once the job ended)."""
        deadline = time.monotonic() + seconds
        while len(self.pids()) < self.ranks:
            if self.process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def reported(self, kind):
        """What the ranks reported as `kind` (READY, SHM, SAVED, END), in rank order."""
        found = []
        for path in sorted(Path(self.directory).glob("rank*.txt")):
            found += [line.split(maxsplit=1)[1].strip() for line in path.read_text().splitlines()
                      if line.startswith(kind + " ")]
        return found

    def pids(self):
        return dict(tuple(map(int, ready.split())) for ready in self.reported("READY"))

    def output(self):
        self._reader.join(timeout=5)
        return "".join(self.lines)


def run_one(ranks, event, rng, log):
    """Launch one job, inject `event` into it, check the invariants; returns a summary."""
    if shutil.which("mpiexec") is None:
        raise RuntimeError("no mpiexec on PATH (pip install mpich)")
    directory = tempfile.mkdtemp(prefix="mpigrad-soak-")
    marker = f"mpigrad-soak-{uuid.uuid4().hex}"
    job_ = _Job(ranks, directory, marker)
    try:
        if not job_.wait_until_ready(START_LIMIT):
            raise InvariantBroken(f"the {ranks}-rank job did not start within {START_LIMIT} s:"
                                  f"\n{_ended_output(job_)}")
        time.sleep(rng.uniform(0.2, 1.5))  # into the training, at a random point
        victim = rng.randrange(ranks)
        pid = job_.pids()[victim]
        struck = time.monotonic()
        if event == "kill":
            os.kill(pid, signal.SIGKILL)
        elif event in ("stop", "stop-resume"):
            os.kill(pid, signal.SIGSTOP)
        if event == "stop-resume":
            time.sleep(rng.uniform(0.2, TIMEOUT / 3))
            os.kill(pid, signal.SIGCONT)
        if event in ("stop-resume", "none"):
            Path(directory, _STOP_FILE).touch()
        try:
            status = job_.process.wait(timeout=TIMEOUT + MARGIN)
        except subprocess.TimeoutExpired:
            raise InvariantBroken(
                f"{event} of rank {victim} of {ranks}: the job still runs "
                f"{TIMEOUT + MARGIN} s later (the group's timeout is {TIMEOUT} s)"
                f":\n{_ended_output(job_)}") from None
        seconds = time.monotonic() - struck
        output = job_.output()
        _check_outcome(event, ranks, status, len(job_.reported("END")), output)
        _check_nothing_left(marker, job_.reported("SHM"), output)
        checkpoints = _check_checkpoints(directory, job_.reported("SAVED"), output)
        what = "no fault" if event == "none" else f"{event} of rank {victim}"
        summary = (f"{ranks} ranks, {what}: ended {seconds:.1f} s later (exit {status}), "
                   f"{checkpoints} checkpoints loadable, nothing left")
        log(summary)
        return summary
    finally:
        _kill_survivors(marker)
        shutil.rmtree(directory, ignore_errors=True)


def _ended_output(job_):
    """The output so far, once the job's processes are killed (so the reader finishes)."""
    _kill_survivors(job_.marker)
    job_.process.kill()
    return job_.output()


def _check_outcome(event, ranks, status, ended, output):
    clean = ended == ranks
    if event in ("kill", "stop") and (status == 0 or clean):
        raise InvariantBroken(f"{event}: the job finished as if nothing happened (exit "
                              f"{status}):\n{output}")
    if event in ("stop-resume", "none") and (status != 0 or not clean):
        raise InvariantBroken(f"{event}: the job did not finish cleanly on every rank (exit "
                              f"{status}):\n{output}")
    if status == 124:
        raise InvariantBroken(f"{event}: the job hung until `timeout` ended it:\n{output}")


def _kill_survivors(marker):
    kill(survivors(marker, grace_seconds=0))


def _check_nothing_left(marker, segments, output):
    left = survivors(marker)
    if left:
        raise InvariantBroken(f"processes left behind: {left}\n{output}")
    if not segments:  # MPI's own, at least: a report that went missing would check nothing
        raise InvariantBroken(f"no rank reported the /dev/shm segments it maps:\n{output}")
    named = [path for path in segments if os.path.exists(path)]
    if named:
        raise InvariantBroken(f"/dev/shm segments left behind: {named}\n{output}")


def _check_checkpoints(directory, saved, output):
    """Every checkpoint file in `directory` loads and holds its step; every one a rank said
    it saved is there."""
    import mpigrad as mg  # no MPI: the driver stays out of the jobs' world

    files = sorted(Path(directory).glob("checkpoint-*.pt"))
    missing = sorted(set(saved) - {str(f) for f in files})
    if missing:
        raise InvariantBroken(f"saved checkpoints missing: {missing}\n{output}")
    for path in files:
        try:
            state = mg.load(path)
        except Exception as err:  # noqa: BLE001 - any failure to load breaks the invariant
            raise InvariantBroken(f"checkpoint {path.name} does not load: {err!r}\n"
                                  f"{output}") from err
        step = int(re.search(r"step(\d+)\.pt$", path.name)[1])
        if state["step"] != step or not state["model"]:
            raise InvariantBroken(f"checkpoint {path.name} holds step {state['step']}")
    return len(files)


def soak(ranks, seconds, seed=0, events=EVENTS, log=print):
    """Run jobs of `ranks` ranks, one event each, `events` in a seeded random order, pass
    after pass, for about `seconds` (at least one pass); returns the summaries. Raises
    InvariantBroken at the first broken invariant."""
    rng = random.Random(seed)
    order = []
    summaries = []
    end = time.monotonic() + seconds
    while order or time.monotonic() < end or not summaries:
        if not order:
            order = rng.sample(list(events), len(events))
        summaries.append(run_one(ranks, order.pop(), rng, log))
    return summaries


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        job(sys.argv[2])  # argv[3], the marker, only tags the processes
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0,
                        help="total time, shared by the sizes (default 1)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for ranks in args.ranks:
        seconds = args.minutes * 60 / len(args.ranks)
        summaries = soak(ranks, seconds, seed=args.seed + ranks, log=print)
        print(f"{ranks} ranks: {len(summaries)} jobs, every invariant held", flush=True)


if __name__ == "__main__":
    main()
