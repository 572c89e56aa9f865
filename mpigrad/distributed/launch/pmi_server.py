"""A process-management server speaking PMI-1, so that N processes started by something other
than an MPI launcher (torchrun, multiprocessing, a batch system's plain `srun`) initialise MPI as
one world of N ranks. Started by rank 0 as its own process (`python pmi_server.py HOST PORT N
TIMEOUT`, the job's secret in its environment as MPIGRAD_RENDEZVOUS_SECRET, never on its command
line, which every user of the node can read); see `rendezvous` for the client side and why.

It does what mpiexec's proxy does for MPICH's PMI-1 clients, and nothing more:

- `init`, `get_maxes`, `get_appnum`, `get_my_kvsname`, `get_universe_size`: constants.
- `put` / `get`: one key-value space, in which the ranks publish their network addresses;
  `PMI_process_mapping` is computed from the host names the ranks gave (ranks on one host
  share memory), so MPI's shared-memory transport works within a node.
- `barrier_in`: answered with `barrier_out` once all N ranks are in.
- `finalize`, `abort`.

Who may talk to it. It listens on the address the ranks were told (MASTER_ADDR: a loopback
address for `localhost`), and every connection starts with a challenge, `cmd=mpigrad_challenge
nonce=S`, which the client answers in its first line with `proof=HMAC-SHA256(secret, S, the
line's fields, its own nonce C)`; the server's acceptance carries its own proof over C. A
challenge rather than the secret itself: the secret never crosses the network, so watching one
job's traffic gives nothing for the next job that shares the secret, and a rank that holds the
job's secret never talks to an impostor that took the port first. (The proof is only as good as
where the rank got the secret: a file:// rendezvous reads it from the rendezvous file, which the
rank therefore trusts only as rank 0 makes it; see `rendezvous`.) Two kinds of first line are
accepted:

- `mpigrad_hello rank=R size=N host=H`, the control connection every rank opens before MPI
  starts. The server checks that the ranks agree on the world size and that no rank appears
  twice, and answers every rank with `mpigrad_welcome` once all N are there, or with
  `mpigrad_refused reason=...`; it keeps these connections open and, when any rank aborts
  (MPI_Abort sends `abort`), tells every rank to exit (`mpigrad_abort code=C`), as mpiexec
  would kill them. A rank's abort arrives as PMI's `abort` or, from mpigrad's
  abort-on-exception hook, as `mpigrad_abort_request code=C` on its control connection.
  A rank ending normally says `mpigrad_goodbye` on it first (PMI's `finalize` would say the
  same, but MPICH sends it from the C library's exit, which a process leaving through
  `os._exit` skips). A rank whose connection ends without either crashed (killed, died in
  native code), and so did one that leaves while the others wait for it in a PMI barrier
  (MPI_Finalize's): the job cannot go on, and every other rank is told to exit
  (`mpigrad_crashed rank=R`).
- `mpigrad_pmi rank=R`, after the welcome: this connection becomes rank R's PMI connection,
  which the rank hands to MPI as an open descriptor (`PMI_FD`), so MPI's PMI library never
  connects anywhere itself. Each rank gets one, and only a rank that said hello.

Anything else is closed unanswered, and so is a hello after the world has formed (the job goes
on). Once every rank has both connections, the server stops listening: nothing new can reach it.
Without a secret (an empty key) the proofs are computable by anyone: the rules above still hold,
but whoever reaches the port first can take a rank's place during start-up (docs/security.md).

Limits, so that nobody who merely reaches the port costs more than a moment: at most
`MAX_PENDING` connections that have not yet proven themselves, each closed unless its first
line arrives within `FIRST_LINE_SECONDS`; lines of at most `MAX_LINE` bytes (what the `maxes`
this server advertises allow), printable ASCII; at most `MAX_KEYS_PER_RANK` keys per rank, each
of bounded length, so the key-value space is bounded in count and bytes. An authenticated
connection has no idle timeout: a rank's connections are quiet for the whole of training.

The line parser (`parse`) and reader (`LineReader`) raise only `ProtocolError` for bad input,
and the PMI command handler (`Server.answer`) answers any parsed line with one line, `rc=-1
msg=...` for what it refuses. It exits, quietly, when every rank's control connection has
ended; at once when the job is aborted or a rank crashed; when the world cannot form (ranks
that disagree), once every rank has been told why, those that come later answered at their
hello (after REFUSAL_GRACE_SECONDS if some never come); or when not every rank has said hello
within TIMEOUT seconds (then the ranks that did are told why); each time once the notices
that ended the job are sent, and LINGER_SECONDS later. Its accept loop waits for a
connection or for a change of the job's state, never for a clock.

Only the standard library: it runs in a fresh interpreter, without importing mpigrad or MPI.
"""
import hashlib
import hmac
import os
import re
import secrets
import selectors
import socket
import sys
import threading
import time

SECRET_ENV = "MPIGRAD_RENDEZVOUS_SECRET"

# MPICH names the node's shared-memory segments after the key-value space: it must be unique
# to the job, or a segment left behind by a job that aborted is mistaken for this one's.
KVS_NAME = f"kvs_mpigrad_{socket.gethostname()}_{os.getpid()}_{time.time_ns()}"
KVSNAME_MAX, KEYLEN_MAX, VALLEN_MAX = 256, 256, 1024
# The longest line a PMI client that respects `maxes` sends: a put of the longest kvsname,
# key and value, with room for the field names.
MAX_LINE = KVSNAME_MAX + KEYLEN_MAX + VALLEN_MAX + 512
FIRST_LINE_SECONDS = 10.0
MAX_PENDING = 32
# How long the process outlives its job (see `main`); nobody waits for it.
LINGER_SECONDS = 1.0
# How long a refused world's server still answers the hellos of ranks that have not heard why
# (rank 0 among them when another rank's mistaken hello came first), at most: meanwhile it
# holds the port that a corrected relaunch may want.
REFUSAL_GRACE_SECONDS = 10.0
# MPICH publishes a handful of keys per rank (its business card, a few per node).
MAX_KEYS_PER_RANK = 64

_PRINTABLE = re.compile(rb"[\x20-\x7e]*")
_KEY = re.compile(r"[A-Za-z0-9_/-]+")


class ProtocolError(ValueError):
    """A line the server does not accept: longer than MAX_LINE, not printable ASCII, or not
    starting with `cmd=NAME`. The connection that sent it is closed."""


def proof(secret, nonce, *words):
    """What only a holder of `secret` can answer to the challenge `nonce` about `words`."""
    message = "\n".join([nonce, *map(str, words)]).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def new_nonce():
    return secrets.token_hex(16)


def parse(line):
    """The fields of one line (bytes, without its newline) as a dict of str. PMI-1's grammar:
    space-separated `key=value` words, the first `cmd=NAME`; a word that is not a key followed by
    `=` continues the previous value (MPICH sends abort messages unescaped)."""
    if len(line) > MAX_LINE:
        raise ProtocolError(f"a line of {len(line)} bytes; at most {MAX_LINE}")
    if not _PRINTABLE.fullmatch(line):
        raise ProtocolError("a line that is not printable ASCII")
    words = line.decode("ascii").split(" ")
    if not words[0].startswith("cmd=") or len(words[0]) == len("cmd="):
        raise ProtocolError("a line not starting with cmd=NAME")
    fields, last = {}, None
    for word in filter(None, words):
        key, equals, value = word.partition("=")
        if equals and _KEY.fullmatch(key):
            if key in fields:
                raise ProtocolError(f"the field {key!r} twice in one line")
            fields[key], last = value, key
        else:
            fields[last] += " " + word
    return fields


class LineReader:
    """Lines from a socket, each at most MAX_LINE bytes: a longer one is a ProtocolError before
    more than MAX_LINE + 1 bytes are held."""

    def __init__(self, conn):
        self.conn = conn
        self.buffer = b""

    def line(self, deadline=None):
        """The next line without its newline, or None at the end of the stream. With a
        `deadline` (time.monotonic()), socket.timeout once it passes without a whole line: a
        deadline for the line, so that bytes dribbled one at a time do not prolong it."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                raise ProtocolError(f"a line of more than {MAX_LINE} bytes")
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise socket.timeout("no whole line in time")
                self.conn.settimeout(remaining)
            data = self.conn.recv(MAX_LINE + 1 - len(self.buffer))
            if not data:
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        if len(line) > MAX_LINE:
            raise ProtocolError(f"a line of {len(line)} bytes; at most {MAX_LINE}")
        return line


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


def _send(conn, text):
    try:
        conn.sendall(text.encode())
    except OSError:
        pass


def _rank(text, size):
    """`text` as a rank of a world of `size`, or None."""
    return int(text) if text.isdigit() and len(text) < 10 and int(text) < size else None


class Server:
    def __init__(self, size, timeout, secret=""):
        self.size = size
        self.timeout = timeout
        self.secret = secret
        self.lock = threading.Condition()
        self.kvs = {}             # key -> (rank that put it, value)
        self.keys_of = {}         # rank -> how many keys it put
        self.hosts = {}           # rank -> host name, from the control connections
        self.controls = {}        # rank -> control socket
        self.nonces = {}          # rank -> the nonce its hello carried, for the welcome's proof
        self.pmi_ranks = set()    # ranks whose PMI connection is open
        self.refused = None       # why the world cannot form, once known
        self.refused_at = None    # and since when (time.monotonic())
        self.told = set()         # ranks that have been told so (control connection or hello)
        self.barrier_ranks = set()
        self.barrier_generation = 0
        self.leaving = set()      # ranks that said goodbye (or PMI's finalize): ending is no crash
        self.gone = set()         # ranks whose control connection has ended
        self.aborted = None
        self.pending = threading.BoundedSemaphore(MAX_PENDING)
        self.sending = 0          # notices decided under the lock and not yet sent
        # Written to at every change of the job's state, so that `run`, waiting for a
        # connection, sees it at once instead of at its next look.
        self.wakeup_reader, self.wakeup_writer = socket.socketpair()
        self.wakeup_writer.setblocking(False)

    def changed(self):
        """Wake every thread waiting for the job's state, `run` among them. Called with the
        lock held."""
        self.lock.notify_all()
        try:
            self.wakeup_writer.send(b"\0")
        except BlockingIOError:
            pass  # wake-ups are pending already

    # ------------------------------------------------------------------ first lines
    def serve(self, conn):
        """One accepted connection: the challenge, then a hello or a PMI connection whose
        proof holds, kept for as long as the rank lives; anything else is closed."""
        keep = False
        try:
            try:
                nonce = new_nonce()
                conn.sendall(f"cmd=mpigrad_challenge nonce={nonce}\n".encode())
                reader = LineReader(conn)
                first = reader.line(time.monotonic() + FIRST_LINE_SECONDS)
                fields = parse(first) if first is not None else {}
            finally:
                self.pending.release()
            conn.settimeout(None)
            command = fields.get("cmd")
            if command in ("mpigrad_hello", "mpigrad_pmi") and self.proven(nonce, fields):
                keep = True
                if command == "mpigrad_hello":
                    self.control(conn, reader, fields)
                else:
                    self.pmi(conn, reader, fields)
            elif command in ("mpigrad_hello", "mpigrad_pmi"):
                _send(conn, "cmd=mpigrad_refused reason=the_rendezvous_secret_does_not_match_"
                            "rank_0's\n")
        except (OSError, ProtocolError):
            pass
        finally:
            if not keep:
                conn.close()

    def proven(self, nonce, fields):
        words = [fields.get(k, "") for k in ("cmd", "rank", "size", "host", "nonce")]
        return hmac.compare_digest(proof(self.secret, nonce, *words), fields.get("proof", ""))

    # ------------------------------------------------------------------ control connections
    def control(self, conn, reader, fields):
        """A rank's hello; then its control connection, held open until the rank exits."""
        rank = self.hello(conn, fields)
        if rank is None:
            conn.close()
            return
        try:
            while True:
                line = reader.line()
                if line is None:
                    break
                request = parse(line)
                if request["cmd"] == "mpigrad_abort_request":
                    self.abort(request.get("code", "1"), rank)
                    conn.close()  # tells the rank its request has been passed on
                    return
                if request["cmd"] == "mpigrad_goodbye":
                    with self.lock:
                        self.leaving.add(rank)
        except (OSError, ProtocolError):
            pass
        self.exited(rank)

    def hello(self, conn, fields):
        """Registers the rank and returns it, or None when refused."""
        size = fields.get("size", "")
        rank = _rank(fields.get("rank", ""), self.size)
        with self.lock:
            if len(self.hosts) == self.size or self.refused is not None:
                # Answered alone: the world is formed (or refused) without it.
                reason = self.refused or "the world has formed already"
                if self.refused is not None and rank is not None:
                    self.told.add(rank)
                    self.changed()
                _send(conn, f"cmd=mpigrad_refused reason={reason.replace(' ', '_')}\n")
                return None
            if size != str(self.size):
                reason = (f"rank {fields.get('rank')} was started with world size {size}, but "
                          f"rank 0 with {self.size}")
            elif rank is None:
                reason = f"rank {fields.get('rank')} is outside the world of size {self.size}"
            elif rank in self.hosts:
                reason = f"two processes both claim rank {rank}"
            else:
                reason = None
                self.hosts[rank] = fields.get("host", "")
                self.controls[rank] = conn
                self.nonces[rank] = fields.get("nonce", "")
                self.changed()
                targets = dict(self.controls) if len(self.hosts) == self.size else {}
        if reason is not None:
            self.refuse_all(reason, extra=conn, extra_rank=rank)
            return None
        # Everyone is here: only now may the ranks start MPI, so a missing or mistaken rank is
        # an error before MPI_Init, never a rank stuck inside it.
        for r, target in targets.items():
            _send(target, f"cmd=mpigrad_welcome proof="
                          f"{proof(self.secret, self.nonces[r], 'mpigrad_welcome', r)}\n")
        return rank

    def refuse_all(self, reason, extra=None, extra_rank=None):
        """Tell every rank that has said hello, and the connection `extra` (of rank
        `extra_rank`, when it is one of the world's), that the world cannot form."""
        message = f"cmd=mpigrad_refused reason={reason.replace(' ', '_')}\n"
        with self.lock:
            self.refused = reason
            self.refused_at = time.monotonic()
            self.told.update(self.controls)
            if extra_rank is not None:
                self.told.add(extra_rank)
            self.changed()
            targets = list(self.controls.values()) + ([extra] if extra is not None else [])
            self.sending += 1
        self.send_notice(targets, message)

    def abort(self, code, rank, itself=False):
        """Tell every other rank to exit, and `rank` too if `itself`: MPI_Abort waits for the
        process manager to end it, as mpiexec does (mpigrad's own abort exits by itself)."""
        code = code if re.fullmatch(r"-?[0-9]{1,9}", code) else "1"
        self.end_job(f"cmd=mpigrad_abort code={code} rank={rank}", code,
                     spare=None if itself else rank)

    def end_job(self, notice, code, spare=None, unless_over=False):
        """Tell every rank but `spare` to exit, with the line `notice`; with `unless_over`,
        only if the job has not ended already (the ranks then know why)."""
        with self.lock:
            if unless_over and (self.aborted is not None or self.refused is not None):
                return
            self.aborted = code
            self.changed()
            targets = [conn for r, conn in self.controls.items() if r != spare]
            self.sending += 1
        self.send_notice(targets, notice + "\n")

    def send_notice(self, targets, message):
        """Send a notice that ends the job, counted in `sending` under the lock when it was
        decided (and sent outside it): `run` returns only once it is out."""
        try:
            for conn in targets:
                _send(conn, message)
        finally:
            with self.lock:
                self.sending -= 1
                self.changed()

    def exited(self, rank):
        """A rank's process ended: after its goodbye, a normal exit; otherwise, or if the
        others wait for it in a barrier, it crashed, and since the job cannot go on without
        it (the others would wait for it forever), every rank is told to exit."""
        with self.lock:
            self.controls.pop(rank, None)
            self.gone.add(rank)
            self.changed()
            culprit = rank if rank not in self.leaving else self.stranded()
        if culprit is not None:
            self.crashed(culprit)

    def stranded(self):
        """A rank that has gone while the others wait for it in the open PMI barrier, which
        can then never complete, or None. Called with the lock held."""
        if not self.barrier_ranks:
            return None
        return next((r for r in sorted(self.gone) if r not in self.barrier_ranks), None)

    def crashed(self, rank):
        self.end_job(f"cmd=mpigrad_crashed rank={rank}", "1", unless_over=True)

    # ------------------------------------------------------------------ PMI connections
    def pmi(self, conn, reader, fields):
        """Rank R's PMI connection, once per rank and only after the world has formed."""
        rank = _rank(fields.get("rank", ""), self.size)
        with self.lock:
            accepted = (rank is not None and len(self.hosts) == self.size
                        and rank not in self.pmi_ranks and self.refused is None)
            if accepted:
                self.pmi_ranks.add(rank)
                self.changed()
        if not accepted:
            _send(conn, "cmd=mpigrad_refused reason=not_a_rank_without_a_PMI_connection\n")
            conn.close()
            return
        _send(conn, f"cmd=mpigrad_pmi_ok proof="
                    f"{proof(self.secret, fields.get('nonce', ''), 'mpigrad_pmi_ok', rank)}\n")
        try:
            while True:
                line = reader.line()
                if line is None:
                    return
                fields = parse(line)
                if fields["cmd"] == "abort":
                    self.abort(fields.get("exitcode", "1"), rank, itself=True)
                    return
                conn.sendall(self.answer(rank, fields).encode())
                if fields["cmd"] == "finalize":
                    return
        except (OSError, ProtocolError):
            conn.close()
        finally:
            with self.lock:
                self.changed()

    def answer(self, rank, fields):
        """The reply line to rank `rank`'s PMI command `fields` (parsed, `abort` aside)."""
        command = fields["cmd"]
        if command == "init":
            return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
        if command == "get_maxes":
            return (f"cmd=maxes kvsname_max={KVSNAME_MAX} keylen_max={KEYLEN_MAX} "
                    f"vallen_max={VALLEN_MAX}\n")
        if command == "get_appnum":
            return "cmd=appnum appnum=0\n"
        if command == "get_my_kvsname":
            return f"cmd=my_kvsname kvsname={KVS_NAME}\n"
        if command == "get_universe_size":
            return f"cmd=universe_size size={self.size}\n"
        if command == "put":
            return f"cmd=put_result {self.put(rank, fields.get('key'), fields.get('value'))}\n"
        if command == "get":
            key = fields.get("key")
            value = self.lookup(key) if key is not None else None
            return (f"cmd=get_result rc=0 value={value}\n" if value is not None
                    else "cmd=get_result rc=-1 msg=key_not_found\n")
        if command == "barrier_in":
            self.barrier(rank)
            return "cmd=barrier_out\n"
        if command == "finalize":
            with self.lock:
                self.leaving.add(rank)
            return "cmd=finalize_ack\n"
        return f"cmd={command} rc=-1 msg=unsupported_by_mpigrad\n"

    def put(self, rank, key, value):
        if key is None or value is None:
            return "rc=-1 msg=put_needs_a_key_and_a_value"
        if len(key) > KEYLEN_MAX or len(value) > VALLEN_MAX:
            return "rc=-1 msg=key_or_value_longer_than_maxes"
        if key == "PMI_process_mapping":
            return "rc=-1 msg=reserved_key"
        with self.lock:
            owner, _ = self.kvs.get(key, (rank, None))
            if owner != rank:
                return "rc=-1 msg=key_put_by_another_rank"
            if key not in self.kvs:
                if self.keys_of.get(rank, 0) >= MAX_KEYS_PER_RANK:
                    return "rc=-1 msg=too_many_keys"
                self.keys_of[rank] = self.keys_of.get(rank, 0) + 1
            self.kvs[key] = (rank, value)
        return "rc=0"

    def lookup(self, key):
        if key == "PMI_process_mapping":
            return process_mapping(self.all_hosts())
        with self.lock:
            return self.kvs.get(key, (None, None))[1]

    def all_hosts(self):
        # Only a rank of a formed world has a PMI connection, so every host is known.
        with self.lock:
            return [self.hosts[r] for r in range(self.size)]

    def barrier(self, rank):
        """Wait until every rank is in; a rank counts once however often it asks. A barrier
        that a rank which has gone never entered ends the job instead, naming that rank."""
        with self.lock:
            generation = self.barrier_generation
            self.barrier_ranks.add(rank)
            if len(self.barrier_ranks) == self.size:
                self.barrier_ranks.clear()
                self.barrier_generation += 1
                self.changed()
            stranded = self.stranded()
        if stranded is not None:
            self.crashed(stranded)
        with self.lock:
            while self.barrier_generation == generation and self.aborted is None:
                self.lock.wait()

    def everyone_told(self):
        # by rank: a mistaken hello may carry a rank outside this world, and it is told too
        with self.lock:
            return self.told.issuperset(range(self.size))

    def finished(self):
        with self.lock:
            return self.aborted is not None or len(self.gone) == self.size

    # ------------------------------------------------------------------ listening
    def run(self, listener):
        """Accept connections until the job is over; returns the process's exit code once
        the notices that ended it have been sent. Woken by each connection and each change
        of the job's state (`changed`), never by a clock but the joining deadline."""
        deadline = time.monotonic() + self.timeout
        code = 0
        listener.setblocking(False)
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(self.wakeup_reader, selectors.EVENT_READ)
            while not self.finished():
                with self.lock:
                    complete = len(self.hosts) == self.size
                    connected = len(self.pmi_ranks) == self.size
                    refused = self.refused is not None
                    until = (deadline if not refused else
                             min(deadline, self.refused_at + REFUSAL_GRACE_SECONDS))
                # A refused world's server stays, answering each hello with the reason, until
                # every rank has heard it (or for the grace): a rank that comes after the
                # refusal (rank 0 itself, when another rank's mistaken hello came first) would
                # otherwise find nobody and wait out its whole timeout.
                if refused and (self.everyone_told() or time.monotonic() > until):
                    code = 1
                    break
                if not refused and not complete and time.monotonic() > deadline:
                    with self.lock:
                        missing = [r for r in range(self.size) if r not in self.hosts]
                    self.refuse_all(f"ranks {missing} did not join within {self.timeout:g} "
                                    "seconds")
                    continue
                if connected and listener.fileno() != -1:
                    # Every rank has all it needs: nothing new may come in.
                    selector.unregister(listener)
                    listener.close()
                waiting = None if complete else max(until - time.monotonic(), 0)
                for key, _ in selector.select(waiting):
                    if key.fileobj is listener:
                        self.accept(listener)
                    else:
                        self.wakeup_reader.recv(4096)
        with self.lock:
            while self.sending:
                self.lock.wait()
        return code

    def accept(self, listener):
        """Serve a waiting connection in a thread of its own, within MAX_PENDING."""
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return  # the client gave up before it was accepted
        conn.setblocking(True)
        if not self.pending.acquire(blocking=False):
            conn.close()  # too many strangers at once: a rank that meets this retries
            return
        threading.Thread(target=self.serve, args=(conn,), daemon=True).start()


def listen(host, port):
    """A listening socket on `host` (a name or address of this machine) and `port`."""
    family, kind, protocol, _, address = socket.getaddrinfo(host, port,
                                                            type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, protocol)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError:
        listener.close()
        raise
    listener.listen(128)
    return listener


def main(host, port, size, timeout):
    try:
        listener = listen(host, port)
    except OSError as error:
        print(f"error: cannot listen on {host}:{port}: {error}", flush=True)
        return 1
    print(f"ready {listener.getsockname()[1]}", flush=True)
    code = Server(size, timeout, os.environ.pop(SECRET_ENV, "")).run(listener)
    # The last notices are sent, but may still be on their way (to another host): the
    # process's exit, closing the connections, must not overtake them.
    time.sleep(LINGER_SECONDS)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
