"""A process-management server speaking PMI-1, so that N processes started by something other
than an MPI launcher (torchrun, multiprocessing, a batch system's plain `srun`) initialise MPI as
one world of N ranks. Started by rank 0 as its own process (`python pmi_server.py HOST PORT N
TIMEOUT`); see `rendezvous` for the client side and why.

It does what mpiexec's proxy does for MPICH's PMI-1 clients, and nothing more:

- `initack pmiid=R` on connect (the client found `PMI_PORT` and `PMI_ID` in its environment):
  answers with the world size and the rank.
- `init`, `get_maxes`, `get_appnum`, `get_my_kvsname`, `get_universe_size`: constants.
- `put` / `get`: one key-value space, in which the ranks publish their network addresses;
  `PMI_process_mapping` is computed from the host names the ranks gave (ranks on one host
  share memory), so MPI's shared-memory transport works within a node.
- `barrier_in`: answered with `barrier_out` once all N ranks are in.
- `finalize`, `abort`.

Before initialising MPI every rank also opens a control connection of mpigrad's own
(`mpigrad_hello rank=R size=N host=H`). The server checks that the ranks agree on the world size
and that no rank appears twice, and answers every rank with `mpigrad_welcome` once all N are
there, or with `mpigrad_refused reason=...`; it keeps these connections open and, when any rank aborts
(MPI_Abort sends `abort`), tells every rank to exit (`mpigrad_abort code=C`), as mpiexec would
kill them. A rank's abort arrives as PMI's `abort` (MPI_Abort) or, from mpigrad's abort-on-exception
hook, as `mpigrad_abort_request code=C` on its control connection. It exits when every rank
has finalized or disconnected, or when not every rank has said hello within TIMEOUT seconds
(then the ranks that did are told why).

Only the standard library: it runs in a fresh interpreter, without importing mpigrad or MPI.
"""
import os
import socket
import sys
import threading
import time

# MPICH names the node's shared-memory segments after the key-value space: it must be unique
# to the job, or a segment left behind by a job that aborted is mistaken for this one's.
KVS_NAME = f"kvs_mpigrad_{socket.gethostname()}_{os.getpid()}_{time.time_ns()}"


def parse(line):
    fields = {}
    for word in line.split():
        key, _, value = word.partition("=")
        fields[key] = value
    return fields


def process_mapping(hosts):
    """MPICH's PMI_process_mapping, `(vector,(node,1,count),...)`: runs of consecutive ranks
    on one host, with hosts numbered in the order they first appear."""
    node_ids = {}
    runs = []
    for host in hosts:
        node = node_ids.setdefault(host, len(node_ids))
        if runs and runs[-1][0] == node:
            runs[-1][1] += 1
        else:
            runs.append([node, 1])
    return "(vector," + ",".join(f"({node},1,{count})" for node, count in runs) + ")"


class Server:
    def __init__(self, size, timeout):
        self.size = size
        self.timeout = timeout
        self.lock = threading.Condition()
        self.kvs = {}
        self.hosts = {}           # rank -> host name, from the control connections
        self.controls = {}        # rank -> control socket
        self.refused = None       # why the world cannot form, once known
        self.barrier_count = 0
        self.barrier_generation = 0
        self.finalized = set()
        self.aborted = None

    # ------------------------------------------------------------------ control connections
    def hello(self, conn, fields):
        rank, size, host = int(fields["rank"]), int(fields["size"]), fields["host"]
        with self.lock:
            if size != self.size:
                reason = (f"rank {rank} was started with world size {size}, but rank 0 with "
                          f"{self.size}")
            elif rank in self.hosts:
                reason = f"two processes both claim rank {rank}"
            elif not 0 <= rank < self.size:
                reason = f"rank {rank} is outside the world of size {self.size}"
            else:
                reason = None
                self.hosts[rank] = host
                self.controls[rank] = conn
                self.lock.notify_all()
                complete = len(self.hosts) == self.size
        if reason is not None:
            self.refuse_all(reason, extra=conn)
            return False
        if complete:
            # Everyone is here: only now may the ranks start MPI, so a missing or mistaken rank
            # is an error before MPI_Init, never a rank stuck inside it.
            with self.lock:
                targets = list(self.controls.values())
            for target in targets:
                target.sendall(b"cmd=mpigrad_welcome\n")
        return True

    def refuse_all(self, reason, extra=None):
        message = f"cmd=mpigrad_refused reason={reason.replace(' ', '_')}\n".encode()
        with self.lock:
            self.refused = reason
            targets = list(self.controls.values()) + ([extra] if extra is not None else [])
        for conn in targets:
            try:
                conn.sendall(message)
            except OSError:
                pass

    def abort(self, code, rank):
        """Tell every other rank to exit; `rank` itself is already on its way out."""
        with self.lock:
            self.aborted = code
            self.lock.notify_all()
            targets = [conn for r, conn in self.controls.items() if r != rank]
        for conn in targets:
            try:
                conn.sendall(f"cmd=mpigrad_abort code={code} rank={rank}\n".encode())
            except OSError:
                pass

    def exited(self, rank):
        """A rank's process ended: fine after MPI_Finalize, otherwise the job cannot go on
        (the others would wait for it forever), so every rank is told to exit."""
        with self.lock:
            self.controls.pop(rank, None)
            ended_early = (rank not in self.finalized and self.aborted is None
                           and self.refused is None)
        if ended_early:
            self.abort(1, rank)

    def all_hosts(self):
        # Once the world is refused this never returns: the ranks' watchers end them, and an
        # MPI library left without an answer is safer than one given half a world.
        with self.lock:
            while len(self.hosts) < self.size:
                self.lock.wait()
            return [self.hosts[r] for r in range(self.size)]

    # ------------------------------------------------------------------ PMI connections
    def pmi(self, conn, first_fields):
        rank = int(first_fields["pmiid"])
        send = conn.sendall
        send(f"cmd=initack\ncmd=set size={self.size}\ncmd=set rank={rank}\n"
             "cmd=set debug=0\n".encode())
        try:
            for line in lines(conn):
                fields = parse(line)
                command = fields.get("cmd")
                if command == "init":
                    send(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n")
                elif command == "get_maxes":
                    send(b"cmd=maxes kvsname_max=256 keylen_max=256 vallen_max=1024\n")
                elif command == "get_appnum":
                    send(b"cmd=appnum appnum=0\n")
                elif command == "get_my_kvsname":
                    send(f"cmd=my_kvsname kvsname={KVS_NAME}\n".encode())
                elif command == "get_universe_size":
                    send(f"cmd=universe_size size={self.size}\n".encode())
                elif command == "put":
                    with self.lock:
                        self.kvs[fields["key"]] = fields["value"]
                    send(b"cmd=put_result rc=0\n")
                elif command == "get":
                    value = self.lookup(fields["key"])
                    send((f"cmd=get_result rc=0 value={value}\n" if value is not None
                          else "cmd=get_result rc=-1 msg=key_not_found\n").encode())
                elif command == "barrier_in":
                    self.barrier()
                    send(b"cmd=barrier_out\n")
                elif command == "finalize":
                    with self.lock:
                        self.finalized.add(rank)
                    send(b"cmd=finalize_ack\n")
                    return
                elif command == "abort":
                    self.abort(fields.get("exitcode", "1"), rank)
                    return
                else:
                    send(f"cmd={command} rc=-1 msg=unsupported_by_mpigrad\n".encode())
        finally:
            with self.lock:
                self.lock.notify_all()

    def lookup(self, key):
        if key == "PMI_process_mapping":
            return process_mapping(self.all_hosts())
        with self.lock:
            return self.kvs.get(key)

    def barrier(self):
        with self.lock:
            generation = self.barrier_generation
            self.barrier_count += 1
            if self.barrier_count == self.size:
                self.barrier_count = 0
                self.barrier_generation += 1
                self.lock.notify_all()
            while self.barrier_generation == generation and self.aborted is None:
                self.lock.wait()

    def finished(self):
        with self.lock:
            return self.aborted is not None or len(self.finalized) == self.size

    def serve(self, conn):
        try:
            first = next(lines(conn), None)
            if first is None:
                return
            fields = parse(first)
            if fields.get("cmd") == "mpigrad_hello":
                if self.hello(conn, fields):
                    rank = int(fields["rank"])
                    for line in lines(conn):  # held open until the rank exits
                        request = parse(line)
                        if request.get("cmd") == "mpigrad_abort_request":
                            self.abort(request.get("code", "1"), rank)
                            conn.close()
                            return
                    self.exited(rank)
            elif fields.get("cmd") == "initack":
                self.pmi(conn, fields)
        except (OSError, ValueError, KeyError):
            pass


def lines(conn):
    buffer = b""
    while True:
        data = conn.recv(65536)
        if not data:
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()


def main(host, port, size, timeout):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        print(f"error: cannot listen on {host}:{port}: {error}", flush=True)
        return 1
    listener.listen(128)
    listener.settimeout(0.5)
    print(f"ready {listener.getsockname()[1]}", flush=True)
    server = Server(size, timeout)
    deadline = time.monotonic() + timeout
    while not server.finished():
        with server.lock:
            complete = len(server.hosts) == size
            refused = server.refused is not None
        if refused:
            time.sleep(1.0)  # the refusal reaches the ranks before their connections close
            return 1
        if not complete and time.monotonic() > deadline:
            with server.lock:
                missing = [r for r in range(size) if r not in server.hosts]
            server.refuse_all(f"ranks {missing} did not join within {timeout:g} seconds")
            continue
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        threading.Thread(target=server.serve, args=(conn,), daemon=True).start()
    time.sleep(0.5)  # let the last answers and abort notices leave
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
