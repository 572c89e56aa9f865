"""Launching without mpiexec: one MPI world out of processes that torchrun (or anything that
sets torch's variables) started, or that meet through init_process_group's init_method.

torchrun, `torch.multiprocessing` scripts and batch systems start N ordinary processes and
tell each its place through the environment (`WORLD_SIZE`, `RANK`, `MASTER_ADDR`,
`MASTER_PORT`) or an `init_method` URL (`env://`, `tcp://host:port`, `file:///path`). Each
such process, initialising MPI on its own, is a world of one. mpigrad either joins them into one
MPI world or refuses, saying how to launch; it never lets N worlds of one run as if they were a
job (every `all_reduce` would silently return the local value).

How the world is built (MPICH, the `mpich` extra's library): the same way mpiexec does it.
MPICH's processes learn their rank and exchange their network addresses through a
process-management server, over a connection they inherit (`PMI_FD`). Rank 0 starts a small
PMI-1 server of mpigrad's own (`pmi_server.py`, a separate process, so it outlives rank 0's
interpreter during MPI_Finalize) on `MASTER_ADDR:MASTER_PORT`, listening on that address's
interface only; every rank checks in with it, opens its PMI connection, sets `PMI_FD`,
`PMI_RANK` and `PMI_SIZE` and initialises MPI, which forms `MPI.COMM_WORLD` of `WORLD_SIZE`
ranks, with shared memory between the ranks of a node. Both connections answer the server's
challenge with the job's secret (`job_secret`: `MPIGRAD_RENDEZVOUS_SECRET`, or torchrun's run
id), so that nobody outside the job is heard; MPI's PMI library, which cannot answer a
challenge, gets a connection that already has (rather than `PMI_PORT`, to which it would
connect by itself). Under torchrun, whose own store already listens on
`MASTER_PORT`, the server takes `MASTER_PORT + 1` (`MPIGRAD_RENDEZVOUS_PORT` overrides). This
needs to happen before MPI is initialised: for torchrun's variables, when `mpigrad.distributed`
is imported (`join_from_environment`); otherwise at `init_process_group`. A rank that exits
normally says goodbye on its control connection (`say_goodbye`, at the interpreter's exit); if
any rank aborts, or ends without a goodbye (killed, crashed), the server tells the others to
exit, naming it, as mpiexec would.

file:// URLs name no address: rank 0 starts the server on every interface and writes
`host:port` and the job's secret (made up when the environment gives none) into the file,
created by this user with no permission for group or others and renamed into place whole. The
file says which server to trust, so the other ranks trust only such a file: they open it
without following a symbolic link or blocking (a FIFO), and refuse at once, naming the path,
anything that is not a regular file of their own user with no group or other permission bits
(a file planted there by someone else would take them into the planter's world). A complete
file that names a server nobody answers at is read again after each failed connection, until
the timeout: it can be a stale one, left by a job killed during its rendezvous, that rank 0
has not replaced yet. Rank 0 removes its file once every rank has checked in, or once the
world cannot form, so jobs may use one path in turn (never at the same time).

What was tried first, and why not: `MPI_Open_port` / `MPI_Comm_accept` / `MPI_Comm_connect`
(the port name passed through a file or socket, then `Intercomm_merge`) and `MPI_Comm_join`
over a socket. Between processes each started by its own `mpiexec -n 1` they work, but between
processes that initialised MPI as singletons (what torchrun starts) MPICH 5.0 refuses the
connection: "Local and remote groups in MPI_Intercomm_create must not contain the same
processes; both contain process 0" -- every singleton is process 0 of an identically named
world. Open MPI's singletons need its PMIx server in the same way; with Open MPI (or any MPI
not reading `PMI_PORT`) the world stays of size one and `check_world` refuses it with the
launch instructions.

When MPI starts: under an MPI launcher, or when torchrun's variables describe a world of
several, at the import of `mpigrad.distributed`, as before. In any other process (a plain
`python`, N processes started separately, `mpigrad.multiprocessing` children, which set
MASTER_ADDR in the child and then call `init_process_group(rank=r, world_size=n)`), the import
leaves MPI uninitialised (`defer_mpi_start`: mpi4py's `rc.initialize = False`, with
`rc.finalize = True` so that MPI_Finalize still runs at exit), and `init_process_group` (or
`rpc.init_rpc`) calls `start_mpi`: it builds the Request from `init_method` (env:// when None)
and rank/world_size, joins as above when the world has several processes, then initialises
MPI (`MPI_Init_thread` at mpi4py's `rc.thread_level`, MPI_THREAD_MULTIPLE by default).
Without init_method, world_size or WORLD_SIZE, the process is a world of one. Nothing in
`mpigrad.distributed` calls MPI at import time: MPICH aborts the process on a call before
MPI_Init. A script that calls mpi4py itself before `init_process_group` must therefore import
`mpi4py.MPI` before `mpigrad.distributed` (MPI then starts at that import, as a world of one
outside a launcher: `check_world` refuses it if more were asked for).
"""
import atexit
import errno
import hmac
import ipaddress
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
import warnings

import mpi4py  # its configuration only: mpi4py.MPI is what initialises MPI

from ...launchers import PMI_PORT_VARIABLES, mpi_launcher
from .. import settings
from . import pmi_server

_PORT_ENV = "MPIGRAD_RENDEZVOUS_PORT"
_TIMEOUT_ENV = "MPIGRAD_RENDEZVOUS_TIMEOUT"
_SECRET_ENV = pmi_server.SECRET_ENV
_DEFAULT_TIMEOUT = 120.0
_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pmi_server.py")
# A file:// rendezvous file holds `host:port` and a secret: far less than this.
_MAX_FILE_BYTES = 4096
_control = {}  # the open control connection and its watcher thread, kept for the job's life

HOW_TO_LAUNCH = ("Launch the N processes with MPI: `mpiexec -n N python script.py` (or `srun "
                 "--mpi=pmi2 ...` under Slurm), or with torchrun (`torchrun --nproc_per_node=N "
                 "script.py`), or start them yourself (mpigrad.multiprocessing.spawn, or N "
                 "separate `python` processes) and call init_process_group in each with its "
                 "rank and world_size and where to meet (init_method='tcp://host:port' of rank "
                 "0, 'file:///shared/path', or MASTER_ADDR and MASTER_PORT), before anything "
                 "imports mpi4py's MPI.")


class Request:
    """Where this process belongs: `rank` of `world_size`, meeting at `host:port` or through
    the file `path` (file:// URLs), as `source` (for messages) said."""

    def __init__(self, rank, world_size, host=None, port=None, path=None, source=""):
        self.rank, self.world_size = rank, world_size
        self.host, self.port, self.path, self.source = host, port, path, source

    def __repr__(self):
        return f"rank {self.rank} of {self.world_size} ({self.source})"


def _int_variable(name, value):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def request_from_environment(environ=os.environ):
    """The Request torchrun's variables describe, or None when WORLD_SIZE is not set."""
    if "WORLD_SIZE" not in environ:
        return None
    world_size = _int_variable("WORLD_SIZE", environ["WORLD_SIZE"])
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in environ]
    if world_size > 1 and missing:
        raise ValueError(f"WORLD_SIZE={world_size} is set but {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not: the processes cannot "
                         f"find each other. {HOW_TO_LAUNCH}")
    rank = _int_variable("RANK", environ.get("RANK", "0"))
    port = _int_variable("MASTER_PORT", environ.get("MASTER_PORT", "0"))
    if "TORCHELASTIC_USE_AGENT_STORE" in environ:
        port += 1  # torchrun's own store is listening on MASTER_PORT
    if _PORT_ENV in environ:
        port = _int_variable(_PORT_ENV, environ[_PORT_ENV])
    return Request(rank, world_size, environ.get("MASTER_ADDR"), port,
                   source="RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT")


def request_from_init_method(init_method, rank, world_size, environ=os.environ):
    """The Request an `init_method` URL and init_process_group's rank/world_size describe."""
    url = urllib.parse.urlparse(init_method)
    if url.scheme == "env":
        # As torch: rank and world_size given as arguments stand for RANK and WORLD_SIZE.
        given = {name: str(value) for name, value in (("RANK", rank), ("WORLD_SIZE", world_size))
                 if value >= 0}
        request = request_from_environment({**environ, **given})
        if request is None:
            raise ValueError(f"init_method={init_method!r} reads WORLD_SIZE, RANK, MASTER_ADDR "
                             f"and MASTER_PORT from the environment, but WORLD_SIZE is not "
                             f"set (nor world_size given). {HOW_TO_LAUNCH}")
        return request
    if url.scheme not in ("tcp", "file"):
        raise ValueError(f"init_method={init_method!r}: expected an env://, tcp://host:port or "
                         "file:///path URL")
    query = urllib.parse.parse_qs(url.query)
    if rank < 0 and "rank" in query:
        rank = _int_variable("rank", query["rank"][0])
    if world_size < 0 and "world_size" in query:
        world_size = _int_variable("world_size", query["world_size"][0])
    if rank < 0 or world_size < 0:
        raise ValueError(f"init_method={init_method!r} needs rank and world_size (as arguments "
                         "or in the URL's query, ?rank=R&world_size=N)")
    if url.scheme == "tcp":
        if not url.hostname or not url.port:
            raise ValueError(f"init_method={init_method!r}: expected tcp://host:port")
        return Request(rank, world_size, url.hostname, url.port, source=init_method)
    return Request(rank, world_size, path=url.path, source=init_method)


def mpi_initialized():
    """Whether MPI has been initialised, without initialising it."""
    module = sys.modules.get("mpi4py.MPI")
    return module is not None and module.Is_initialized()


def join_from_environment():
    """Before MPI is initialised: build one world from torchrun's variables when they describe
    a world of several processes and no MPI launcher started us. Does nothing otherwise,
    including when RANK is missing: a child of a script that set WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT for all its children learns its rank only from `init_process_group(rank=...)`,
    which then joins (and says what is missing if nothing gives the rank)."""
    if mpi_launcher() is not None or mpi_initialized() or "RANK" not in os.environ:
        return
    request = request_from_environment()
    if request is not None and request.world_size > 1:
        join(request)


def defer_mpi_start():
    """At the import of mpigrad.distributed, after `join_from_environment`: in a process that no
    MPI launcher started and that joined no torchrun world, leave MPI uninitialised, so that
    `init_process_group` (or `init_rpc`) can still meet the processes its init_method and
    rank/world_size name before MPI forms the world (`start_mpi`). mpi4py still finalises MPI
    at exit. Nothing to do when mpi4py's MPI is already imported (and so initialised by the
    script's own choice)."""
    if mpi_launcher() is not None or joined() or "mpi4py.MPI" in sys.modules:
        return
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = True


def start_mpi(init_method=None, rank=-1, world_size=-1, timeout=None):
    """Initialise MPI if `defer_mpi_start` left it for now: first meet the processes that
    `init_method` (env:// when None, as in torch) and rank/world_size describe, when they are
    several, so that MPI_Init forms their world. env:// without world_size or WORLD_SIZE
    leaves the process a world of one, as under a plain `python script.py`. Raises, naming the
    cause, if the world cannot form within `timeout` seconds (MPIGRAD_RENDEZVOUS_TIMEOUT, or
    120, when None); MPI then stays uninitialised."""
    from mpi4py import MPI  # here, not at the top: the import must follow defer_mpi_start
    if MPI.Is_initialized():
        return
    if init_method in (None, "env://") and world_size < 0 and "WORLD_SIZE" not in os.environ:
        request = None
    else:
        request = request_from_init_method(init_method or "env://", rank, world_size)
    if request is not None and request.world_size > 1:
        join(request, timeout)
    if mpi4py.rc.threads:
        levels = {"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED,
                  "serialized": MPI.THREAD_SERIALIZED, "multiple": MPI.THREAD_MULTIPLE}
        MPI.Init_thread(levels.get(mpi4py.rc.thread_level, MPI.THREAD_MULTIPLE))
    else:
        MPI.Init()


def join(request, timeout=None):
    """Meet the other ranks of `request` and hand MPI an authenticated connection to the PMI
    server, so that the MPI initialisation that follows forms their world. Raises, naming the
    cause, if the ranks disagree or do not all arrive within `timeout` seconds."""
    if timeout is None:
        timeout = settings.seconds(_TIMEOUT_ENV, _DEFAULT_TIMEOUT)
    if not 0 <= request.rank < request.world_size:
        raise ValueError(f"rank {request.rank} is outside a world of size {request.world_size}")
    deadline = time.monotonic() + timeout
    secret = job_secret()
    if request.path is None:
        host, port = request.host, request.port
        if request.rank == 0:
            _start_server(host, port, request.world_size, timeout, secret)
        conn, _, _ = _check_in(request, host, port, secret, deadline, timeout)
    elif request.rank == 0:
        host, port, secret, written = _write_rendezvous_file(request, secret, timeout)
        try:
            conn, _, _ = _check_in(request, host, port, secret, deadline, timeout)
        finally:
            # Gone once every rank has read it (all checked in), or once the world cannot
            # form, like torch's file: the next job meeting through the same path must not
            # read this job's address.
            _remove_rendezvous_file(request.path, written)
    else:
        (host, port), secret = _read_rendezvous_file(request, deadline, timeout)
        # The file may be a stale one, left by a job killed during its rendezvous, until
        # rank 0 replaces it: read again after each failed connection.
        conn, (host, port), secret = _check_in(
            request, host, port, secret, deadline, timeout,
            reread=lambda: _rendezvous_file_content(request))
    pmi = _open_pmi_connection(request, host, port, secret, deadline, timeout)
    watcher = threading.Thread(target=_watch, args=(conn,), daemon=True,
                               name="mpigrad-rendezvous-watch")
    watcher.start()
    _control.update(conn=conn, watcher=watcher, pid=os.getpid())
    # Registered before anything that init_process_group registers, so it runs after all of
    # that; mpi4py's MPI_Finalize comes later still, after the interpreter's own exit.
    atexit.register(say_goodbye)
    for name in PMI_PORT_VARIABLES:
        os.environ.pop(name, None)
    # MPI's PMI library uses this open connection and never connects anywhere itself, so
    # nothing but the authenticated ranks ever speaks PMI to the server.
    os.environ.update(PMI_FD=str(pmi.detach()), PMI_RANK=str(request.rank),
                      PMI_SIZE=str(request.world_size))


def joined():
    """Whether this process's MPI world was formed by `join` (not by an MPI launcher)."""
    return "conn" in _control


def say_goodbye():
    """Tell the rendezvous server that this rank is ending normally, so that the end of its
    process is not taken for a crash that the other ranks must be told of. At the
    interpreter's exit, and before MPI_Finalize in a process that leaves with os._exit right
    after it (a forked multiprocessing child), which skips that exit. (PMI's `finalize` says
    the same, but MPICH sends it only from the C library's exit, which os._exit skips too.)"""
    conn = _control.get("conn")
    # A process forked from the rank inherits the connection, but its end is not the rank's.
    if conn is None or _control.get("goodbye") or _control.get("pid") != os.getpid():
        return
    _control["goodbye"] = True
    try:
        conn.sendall(b"cmd=mpigrad_goodbye\n")
    except OSError:
        pass  # the server has gone: nobody is left to misread this rank's end


def abort_job(code):
    """End the job as MPI_Abort would under mpiexec: the server tells every other rank to exit,
    and this one exits with `code`. (MPI_Abort itself would leave this process to exit through
    its atexit handlers with MPI half torn down, which mpiexec hides by killing it first.)"""
    try:
        _control["conn"].sendall(f"cmd=mpigrad_abort_request code={code}\n".encode())
        # The server closes its side once it has passed the message on.
        _control["conn"].settimeout(5)
        _control["conn"].recv(1)
    except OSError:
        pass
    os._exit(code)


def job_secret(environ=os.environ):
    """The secret that every rank of this job has and nobody else: MPIGRAD_RENDEZVOUS_SECRET, or
    torchrun's run id when torchrun made one up (`--standalone`: a random UUID in every rank's
    environment) or was given one (`--rdzv-id`); "" without either (a trusted network)."""
    if environ.get(_SECRET_ENV):
        return environ[_SECRET_ENV]
    run_id = environ.get("TORCHELASTIC_RUN_ID", "none")
    return "" if run_id in ("", "none") else f"torchelastic-run-id:{run_id}"


def _start_server(host, port, world_size, timeout, secret):
    """Rank 0's PMI server on `host`'s interface (all of them only for a wildcard address such
    as 0.0.0.0); returns its port."""
    loopback = _loopback_address(host)
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if loopback and local.isdigit() and int(local) < world_size:
        # Ranks on other hosts would wait out the timeout for a server they cannot reach; a
        # warning, not an error: several "nodes" on one host (a test of a multi-node launch)
        # do reach it.
        warnings.warn(f"MASTER_ADDR={host} is {loopback} on rank 0's host, a loopback address, "
                      f"but only {local} of the {world_size} ranks run under this launcher "
                      "(LOCAL_WORLD_SIZE): ranks on other hosts cannot reach the rendezvous. "
                      "Set MASTER_ADDR (torchrun's --master-addr or --rdzv-endpoint) to the "
                      "address the other hosts use for this one.", RuntimeWarning, stacklevel=2)
    server = subprocess.Popen([sys.executable, _SERVER, host, str(port), str(world_size),
                               str(timeout)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              # Not rank 0's stderr: whoever reads that (a launcher, a test)
                              # would wait for the server too, which may outlive rank 0.
                              stderr=subprocess.DEVNULL, text=True,
                              env=dict(os.environ, **{_SECRET_ENV: secret}))
    first_line = server.stdout.readline().strip()
    if not first_line.startswith("ready"):
        raise RuntimeError(f"rank 0 could not start mpigrad's rendezvous server on {host}:{port}: "
                           f"{first_line or 'it exited'}. Choose a free port (MASTER_PORT, or "
                           f"{_PORT_ENV}) and a MASTER_ADDR that names this host, or launch with "
                           "mpiexec.")
    server.stdout.close()
    _control["server"] = server
    return int(first_line.split()[1])


def _loopback_address(host):
    """The loopback address `host` resolves to here, or None."""
    try:
        address = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError:
        return None
    return address if ipaddress.ip_address(address).is_loopback else None


def _write_rendezvous_file(request, secret, timeout):
    """file:// URLs, rank 0: start the server and write where it listens and a secret for this
    job (made up unless the environment gave one) into the file, which only this user can read
    or write. The server listens on every interface: nothing says which one the others reach.
    Returns the host, port, secret and the file's identity (`_remove_rendezvous_file`)."""
    secret = secret or secrets.token_hex(16)
    port = _start_server("0.0.0.0", 0, request.world_size, timeout, secret)
    host = socket.gethostname()
    staging = f"{request.path}.{os.getpid()}.tmp"
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(descriptor, "w") as file:
        file.write(f"{host}:{port}\n{secret}\n")
        status = os.fstat(descriptor)
    try:
        os.replace(staging, request.path)
    except OSError as error:
        os.remove(staging)
        server = _control.pop("server")
        server.kill()
        server.wait()
        raise RuntimeError(f"rank 0 cannot write the rendezvous file {request.path}: "
                           f"{error.strerror} (in a directory with the sticky bit, such as "
                           "/tmp, another user's file of that name cannot be replaced). Choose "
                           "a path in a directory only you can write.") from None
    return host, port, secret, (status.st_dev, status.st_ino)


def _remove_rendezvous_file(path, written):
    """Remove the rendezvous file rank 0 wrote, unless the path names another file by now."""
    try:
        status = os.stat(path, follow_symlinks=False)
        if (status.st_dev, status.st_ino) == written:
            os.remove(path)
    except FileNotFoundError:
        pass


def _read_rendezvous_file(request, deadline, timeout):
    """file:// URLs, the other ranks: what rank 0 wrote, `((host, port), secret)`, waiting
    until the file is there and complete."""
    while time.monotonic() < deadline:
        found = _rendezvous_file_content(request)
        if found is not None:
            return found
        time.sleep(0.05)
    raise RuntimeError(f"rank {request.rank}: rank 0 did not write {request.path} within "
                       f"{timeout:g} seconds. {HOW_TO_LAUNCH}")


def _rendezvous_file_content(request):
    """What the rendezvous file says now, `((host, port), secret)`, or None while it is absent
    or incomplete. The file names the server and the secret that proves it, so it is trusted
    only as rank 0 makes it: a regular file of this user that nobody else may read or write.
    Anything else at the path (another user's file, a file others may write, a FIFO, a symbolic
    link) is a RuntimeError naming it, opened without following links or blocking, never read."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer.
        descriptor = os.open(request.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        problem = ("is a symbolic link" if error.errno == errno.ELOOP
                   else f"cannot be opened ({error.strerror})")
        raise RuntimeError(_untrusted_file_message(request, problem)) from None
    try:
        problem = _untrusted_file_problem(os.fstat(descriptor))
        if problem is not None:
            raise RuntimeError(_untrusted_file_message(request, problem))
        text = os.read(descriptor, _MAX_FILE_BYTES).decode("ascii", "replace")
    finally:
        os.close(descriptor)
    address, _, written = text.partition("\n")
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and written.endswith("\n"):
        return (host, int(port)), written.strip()
    return None


def _untrusted_file_problem(status):
    """What makes a file with this `os.stat_result` one that rank 0 did not make, or None."""
    mode = stat.filemode(status.st_mode)
    if not stat.S_ISREG(status.st_mode):
        return f"is not a regular file (mode {mode})"
    if status.st_uid != os.geteuid():
        return (f"belongs to uid {status.st_uid}, not to this process's user "
                f"(uid {os.geteuid()})")
    if status.st_mode & 0o077:
        return f"may be read or written by others than its owner (mode {mode})"
    return None


def _untrusted_file_message(request, problem):
    return (f"rank {request.rank} of {request.world_size}: the rendezvous file "
            f"{request.path} {problem}. Rank 0 creates it as a regular file that only its user "
            "may read or write, and the ranks trust nothing else at that path: a file planted "
            "there could send them to another job's server. Remove it, or choose a path in a "
            "directory only you can write, and run every rank as the same user.")


def _handshake(request, address, secret, deadline, timeout, command, reread=None, **fields):
    """A connection to the server on which this rank answered the challenge with `command` and
    `fields`, proven with `secret`, and the server accepted, proving itself in turn, with the
    address and secret that it took; RuntimeError when it refuses or does not know the secret.
    `reread` (file:// rendezvous) gives the address and secret that the rendezvous file names
    now, or None: tried after each failed connection, and after a refusal if they changed."""
    last_error = None
    while True:
        host, port = address
        if time.monotonic() >= deadline:
            raise RuntimeError(f"rank {request.rank} of {request.world_size}: no rendezvous "
                               f"server at {host}:{port} within {timeout:g} seconds "
                               f"({last_error}); rank 0 starts it on MASTER_ADDR, which must "
                               f"name an address of rank 0's host that this one reaches. "
                               f"{HOW_TO_LAUNCH}")
        conn, challenge = _challenged_connection(address, deadline)
        if conn is None:
            last_error = challenge
            time.sleep(0.1)
            address, secret = (reread and reread()) or (address, secret)
            continue
        failure = _prove(request, conn, challenge, address, secret, deadline, command, fields)
        if failure is None:
            conn.settimeout(None)
            return conn, address, secret
        conn.close()
        current = reread and reread()
        if current in (None, (address, secret)):
            raise RuntimeError(f"rank {request.rank} of {request.world_size}: {failure}")
        address, secret = current  # a stale file's server: rank 0 has written anew since


def _challenged_connection(address, deadline):
    """A connection to `address` on which the server's challenge has arrived and the
    challenge, or None and why not."""
    try:
        conn = socket.create_connection(address, timeout=max(deadline - time.monotonic(), 0.1))
    except OSError as error:
        return None, error
    # Bounded as the server bounds a client's first line: a port that accepts and stays
    # silent (a stale file's port, now another program's) must not hold this rank.
    challenge = _read_line(conn, min(deadline, time.monotonic()
                                     + pmi_server.FIRST_LINE_SECONDS))
    if challenge is not None and challenge.startswith("cmd=mpigrad_challenge "):
        return conn, challenge
    # Closed unanswered: the server is busy with too many connections at once.
    conn.close()
    return None, "the server closed the connection"


def _prove(request, conn, challenge, address, secret, deadline, command, fields):
    """Answer `challenge` on `conn` (to `address`) with `command` and `fields`, proven with
    `secret`, and check the server's proof; None when both hold, else what failed."""
    nonce = pmi_server.new_nonce()
    words = [command, request.rank, fields.get("size", ""), fields.get("host", ""), nonce]
    server_nonce = _fields(challenge).get("nonce", "")
    proof = pmi_server.proof(secret, server_nonce, *words)
    conn.sendall(" ".join([f"cmd={command}", f"rank={request.rank}",
                           *(f"{k}={v}" for k, v in fields.items()),
                           f"nonce={nonce}", f"proof={proof}"]).encode() + b"\n")
    # The server's own deadline is the same: allow its refusal, naming who is missing, to arrive.
    reply = _read_line(conn, deadline + 5)
    accepted = {"mpigrad_hello": "mpigrad_welcome", "mpigrad_pmi": "mpigrad_pmi_ok"}[command]
    if reply is None or _fields(reply).get("cmd") != accepted:
        return (f"the rendezvous at {address[0]}:{address[1]} refused to form the world: "
                f"{_reason(reply)}. {HOW_TO_LAUNCH}")
    if not hmac.compare_digest(_fields(reply).get("proof", ""),
                               pmi_server.proof(secret, nonce, accepted, request.rank)):
        return (f"the server at {address[0]}:{address[1]} does not know this job's rendezvous "
                f"secret: another process holds the port, or rank 0 was given another secret "
                f"({_SECRET_ENV}, TORCHELASTIC_RUN_ID)")
    return None


def _check_in(request, host, port, secret, deadline, timeout, reread=None):
    """The control connection, held open for the job's life (it carries aborts both ways),
    with the server's address and the secret it took (see `_handshake` for `reread`)."""
    return _handshake(request, (host, port), secret, deadline, timeout, "mpigrad_hello",
                      reread, size=request.world_size, host=socket.gethostname())


def _open_pmi_connection(request, host, port, secret, deadline, timeout):
    """This rank's PMI connection, accepted once the world has formed, for MPI as PMI_FD."""
    return _handshake(request, (host, port), secret, deadline, timeout, "mpigrad_pmi")[0]


def _read_line(conn, deadline):
    data = b""
    while not data.endswith(b"\n"):
        conn.settimeout(max(deadline - time.monotonic(), 0.1))
        try:
            chunk = conn.recv(4096)
        except OSError:
            return None
        if not chunk or len(data) > pmi_server.MAX_LINE:
            return None
        data += chunk
    return data.decode("ascii", "replace").strip()


def _fields(line):
    return dict(word.partition("=")[::2] for word in line.split())


def _reason(line):
    if line is None:
        return "no answer"
    for word in line.split():
        if word.startswith("reason="):
            return word[len("reason="):].replace("_", " ")
    return line


def _watch(conn):
    """Exit when the server says the job is over: a rank aborted or crashed, or the world
    could not form. Without this, the surviving ranks would wait forever in their next
    collective."""
    buffer = b""
    while True:
        try:
            data = conn.recv(4096)
        except OSError:
            return
        if not data:
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            fields = _fields(line.decode("ascii", "replace"))
            if fields.get("cmd") == "mpigrad_abort":
                code = int(fields.get("code", "1") or 1)
                sys.stderr.write(f"mpigrad: rank {fields.get('rank')} ended the job (exit code "
                                 f"{code}); exiting\n")
            elif fields.get("cmd") == "mpigrad_crashed":
                code = 1
                sys.stderr.write(f"mpigrad: rank {fields.get('rank')} crashed: its process "
                                 "ended without exiting normally (killed by a signal, died in "
                                 "native code, or left through os._exit); exiting\n")
            elif fields.get("cmd") == "mpigrad_refused":
                code = 1
                sys.stderr.write(f"mpigrad: the world could not form: {_reason(line.decode())}"
                                 f". {HOW_TO_LAUNCH}\n")
            else:
                continue
            sys.stderr.flush()
            os._exit(code or 1)


def check_world(mpi_rank, mpi_size, rank=-1, world_size=-1, init_method=None):
    """Refuse a world that is not the one the caller asked for. `rank`/`world_size` are
    init_process_group's arguments (-1: not given); the environment's WORLD_SIZE counts too."""
    if world_size >= 0 and world_size != mpi_size:
        raise ValueError(f"init_process_group(world_size={world_size}) disagrees with MPI, whose "
                         f"world has {mpi_size} process{'es' if mpi_size != 1 else ''}"
                         f"{_size_one_hint(mpi_size, world_size)}")
    if rank >= 0 and rank != mpi_rank:
        raise ValueError(f"init_process_group(rank={rank}) disagrees with MPI, which made this "
                         f"process rank {mpi_rank}; under an MPI launcher MPI decides the ranks: "
                         "leave rank out, or pass dist.get_rank()'s value")
    environment = os.environ.get("WORLD_SIZE")
    if environment is not None and environment.isdigit() and int(environment) != mpi_size:
        raise ValueError(f"WORLD_SIZE={environment} is set, but MPI's world has {mpi_size} "
                         f"process{'es' if mpi_size != 1 else ''}"
                         f"{_size_one_hint(mpi_size, int(environment))}")
    step_tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if step_tasks.isdigit() and int(step_tasks) > 1 and mpi_size == 1:
        # srun without an MPI plugin starts the tasks as separate worlds of one, each of them
        # a rank 0 training alone; every task sees this at once and stops.
        raise RuntimeError(
            f"srun started {step_tasks} tasks, but MPI's world on task "
            f"{os.environ.get('SLURM_PROCID', '?')} has 1 process: srun did not connect them. "
            "Tell srun how MPI starts: `srun --mpi=pmi2 ...` for MPICH (the mpich wheel), "
            "`srun --mpi=pmix ...` for Open MPI (see `srun --mpi=list`), or set "
            "MpiDefault in slurm.conf")


def _size_one_hint(mpi_size, wanted):
    if mpi_size != 1 or wanted <= 1:
        return ""
    return (": MPI was already running as a world of one when init_process_group came (it "
            "was started by an earlier init_process_group, or by importing mpi4py's MPI before "
            "mpigrad.distributed), so mpigrad could not join this process to the others (with "
            f"an MPI library other than MPICH it never can). {HOW_TO_LAUNCH}")
