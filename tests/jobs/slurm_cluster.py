"""A throw-away single-node Slurm cluster on this machine, for testing the sbatch scripts.

Brings up munged, slurmctld and slurmd in the foreground as child processes, each with
its own key, socket, ports, state and log files in one private directory, so nothing
collides with a Slurm or munge already configured on the host. Clients (sbatch, srun,
squeue, ...) find the cluster through ``SLURM_CONF``; use :meth:`SlurmCluster.env`.

The configuration suits a container: no cgroups, no systemd, no accounting database
(``sacct`` does not work; :meth:`SlurmCluster.job` reads ``scontrol show job`` instead,
and finished jobs are kept for ``MinJobAge`` seconds).

From a shell, for trying the job scripts by hand (as root):

    python tests/jobs/slurm_cluster.py start /tmp/slurm   # prints "export SLURM_CONF=..."
    python tests/jobs/slurm_cluster.py stop /tmp/slurm
"""

import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo")
PACKAGES = ("slurm-wlm", "munge")

# Generous: `apt-get update` on a slow mirror, or a first install, can take minutes.
APT_TIMEOUT = 600


def missing_programs():
    return [p for p in DAEMONS + CLIENTS if shutil.which(p) is None]


def ensure_installed(log=print):
    """Install Slurm and munge from Debian packages if they are missing.

    Returns None when everything is there, else the reason it cannot be (for a skip).
    """
    missing = missing_programs()
    if not missing:
        return None
    if os.geteuid() != 0:
        return f"Slurm is not installed ({', '.join(missing)} missing) and we are not root"
    if shutil.which("apt-get") is None:
        return f"Slurm is not installed ({', '.join(missing)} missing) and there is no apt-get"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"],
                ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]):
        log("running: " + " ".join(cmd))
        try:
            run = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                 text=True, timeout=APT_TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(cmd)}` took more than {APT_TIMEOUT}s"
        if run.returncode != 0:
            tail = (run.stdout + run.stderr).strip().splitlines()[-3:]
            return f"`{' '.join(cmd)}` failed (exit {run.returncode}): " + " | ".join(tail)
    missing = missing_programs()
    if missing:
        return f"installed {' '.join(PACKAGES)} but still missing {', '.join(missing)}"
    return None


def _job_fields(line):
    fields = {}
    for word in line.split():
        k, _, v = word.partition("=")
        fields.setdefault(k, v)
    return fields


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child before exec: SIGTERM when the parent dies (Linux prctl)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def client_env(conf):
    """The current environment minus any Slurm job context, pointed at `conf`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    env["SLURM_CONF"] = str(conf)
    return env


SLURM_CONF = """\
# Written by tests/jobs/slurm_cluster.py: one node, no cgroups, no accounting.
ClusterName=mpigrad-test
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket={dir}/munge.socket,cred_expire=5
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# The job scripts pass --mpi themselves; "none" here proves they do.
MpiDefault=none
SchedulerType=sched/builtin
# Look at pending jobs every second, not every minute (a requeued job waits for this).
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Use the CPU count below whatever this machine has, so tests do not depend on it.
SlurmdParameters=config_overrides
ReturnToService=2
# Keep finished jobs visible to `scontrol show job` (there is no sacct here).
MinJobAge=3600
# Job ids unique across clusters brought up on this machine. MPICH names its shared
# memory after the PMI job id (<job id>.<step id> under srun); a rank that was killed
# leaves its segment behind, and a later job with the same id would attach to it.
FirstJobId={first_job_id}
KillWait=10
InactiveLimit=0
SlurmdTimeout=300
NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """munged + slurmctld + slurmd under `workdir`; `start()`, then `stop()` in a finally.

    With `tied=True` (the default) the daemons also get SIGTERM if this process dies
    without calling `stop()` (killed by a timeout, say), so they never outlive a test run.
    """

    def __init__(self, workdir, cpus=4, node="node1", tied=True):
        self.dir = Path(workdir).resolve()
        self.cpus = cpus
        self.node = node
        self.tied = tied
        self.conf = self.dir / "slurm.conf"
        self.procs = {}
        self._logs = {}

    def env(self, **extra):
        return dict(client_env(self.conf), **extra)

    def run(self, *cmd, timeout=60, check=True):
        """Run a Slurm client command against this cluster; returns CompletedProcess."""
        r = subprocess.run(cmd, env=self.env(), stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}"
                               + self.logs())
        return r

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout=60):
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)  # munged refuses directories others may write
        key = self.dir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self.conf.write_text(SLURM_CONF.format(
            host=socket.gethostname(), node=self.node, cpus=self.cpus, dir=self.dir,
            ctld_port=free_port(), slurmd_port=free_port(),
            first_job_id=random.randrange(10**6, 6 * 10**7, 1000)))

        d = self.dir
        self._spawn("munged", ["munged", "--foreground", "--force", f"--key-file={key}",
                               f"--socket={d}/munge.socket", f"--pid-file={d}/munged.pid",
                               f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"])
        self._wait_for(lambda: (d / "munge.socket").exists(), timeout, "munged socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)])
        self._wait_for(lambda: self.run("scontrol", "ping", check=False).returncode == 0,
                       timeout, "slurmctld to answer `scontrol ping`")
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.node, "-f", str(self.conf)])
        self._wait_for(self._node_idle, timeout, f"node {self.node} to become idle")
        (d / "pids").write_text("".join(f"{n} {p.pid}\n" for n, p in self.procs.items()))
        return self

    def stop(self, timeout=30):
        """Cancel every job, wait for them to leave the node, then stop the daemons."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--partition=debug", check=False)
            try:
                self._wait_for(lambda: not self.run("squeue", "-h", "-t", "R,CG",
                                                    check=False).stdout.strip(),
                               timeout, "jobs to end")
            except RuntimeError:
                pass  # stop the daemons anyway
        for name in reversed(DAEMONS):
            p = self.procs.pop(name, None)
            if p is None:
                continue
            p.terminate()
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            self._logs[name].close()

    # -- jobs --------------------------------------------------------------------------

    def job(self, job_id):
        """`scontrol show job` as a dict (JobState, ExitCode, Restarts, ...)."""
        return _job_fields(self.run("scontrol", "show", "job", "-o", str(job_id)).stdout)

    def jobs(self):
        """{job id: `scontrol show job` fields} of every job the controller knows, from one
        call (polling several jobs one `scontrol` each costs a process launch per job)."""
        out = self.run("scontrol", "show", "job", "-o").stdout
        return {int(f["JobId"]): f for f in map(_job_fields, out.splitlines()) if "JobId" in f}

    def wait_job(self, job_id, timeout, poll=0.5):
        """Poll until the job reaches a final state (a requeued job is not final)."""
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                 "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in final:
                return info
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not finished after {timeout}s: {info}"
                                   + self.logs())
            time.sleep(poll)

    def logs(self, lines=20):
        """The tail of each daemon's log, for failure messages."""
        out = []
        for name in DAEMONS:
            f = self.dir / f"{name}.log"
            if f.exists():
                tail = f.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"\n--- {f} (last {lines} lines) ---\n" + "\n".join(tail))
        return "".join(out)

    # -- helpers -----------------------------------------------------------------------

    def _spawn(self, name, cmd):
        out = open(self.dir / f"{name}.out", "ab")
        self._logs[name] = out
        self.procs[name] = subprocess.Popen(cmd, env=self.env(), stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True,
                                            preexec_fn=_die_with_parent if self.tied else None)

    def _node_idle(self):
        r = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def _wait_for(self, ready, timeout, what):
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}"
                                   + self._outputs() + self.logs())
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout}s waiting for {what}"
                                   + self._outputs() + self.logs())
            time.sleep(0.2)

    def _outputs(self):
        return "".join(f"\n--- {f.name} ---\n{f.read_text(errors='replace')[-2000:]}"
                       for f in sorted(self.dir.glob("*.out")) if f.stat().st_size)


def main(argv):
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print("usage: python tests/jobs/slurm_cluster.py start|stop DIR", file=sys.stderr)
        return 2
    workdir = Path(argv[2])
    if argv[1] == "start":
        reason = ensure_installed(log=lambda m: print(m, file=sys.stderr))
        if reason:
            print("cannot start: " + reason, file=sys.stderr)
            return 1
        workdir.mkdir(parents=True, exist_ok=True)
        cluster = SlurmCluster(workdir, tied=False).start()
        print(f"export SLURM_CONF={cluster.conf}")
        return 0
    # stop: the daemons are not our children any more; signal the recorded pids.
    cluster = SlurmCluster(workdir)
    cluster.run("scancel", "--partition=debug", check=False)
    for line in reversed((workdir / "pids").read_text().splitlines()):
        name, pid = line.split()
        try:
            os.kill(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
