"""The rendezvous's PMI server against strangers: only ranks that prove the job's secret get in,
each once and only while the world forms; lines, connections and the key-value space are
bounded; and the line parser, fuzzed, only ever raises its documented ProtocolError. The parser
tests run everywhere; those with a server in a thread run serially (mpi_skip)."""
import random
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest

from mpigrad.distributed.launch import pmi_server, rendezvous
from mpigrad.distributed.launch.pmi_server import MAX_LINE, ProtocolError, Server, parse, proof

from .._environment import launcher_free_environment

SECRET = "the job's secret"
# Addresses as /proc/net/tcp and tcp6 write them.
LOOPBACK = {"0100007F", "00000000000000000000000001000000"}
WILDCARD = {"00000000", "00000000000000000000000000000000"}


# ---------------------------------------------------------------------- the line parser
def test_parse_reads_pmi_lines_and_names_what_it_refuses():
    assert parse(b"cmd=put kvsname=kvs_1 key=bc-0 value=tcp://10.0.0.1:5000") == {
        "cmd": "put", "kvsname": "kvs_1", "key": "bc-0", "value": "tcp://10.0.0.1:5000"}
    # MPICH sends an abort's message unescaped; its words continue the value.
    assert parse(b"cmd=abort exitcode=3 message=application called MPI_Abort(comm=0x8, 3)") == {
        "cmd": "abort", "exitcode": "3",
        "message": "application called MPI_Abort(comm=0x8, 3)"}
    for line, message in [(b"key=value", "not starting with cmd=NAME"),
                          (b"cmd= key=1", "not starting with cmd=NAME"),
                          (b" cmd=get", "not starting with cmd=NAME"),
                          (b"cmd=get key=a key=b", "'key' twice"),
                          (b"cmd=get key=\xff", "not printable ASCII"),
                          (b"cmd=get key=a\tb", "not printable ASCII"),
                          (b"cmd=put value=" + b"v" * MAX_LINE, f"at most {MAX_LINE}")]:
        with pytest.raises(ProtocolError, match=message):
            parse(line)
    assert issubclass(ProtocolError, ValueError)


def _within(seconds, function, **arguments):
    """`function(**arguments)` in a thread: its exception if it raises, a failure if it
    does not return within `seconds`."""
    errors = []

    def run():
        try:
            function(**arguments)
        except BaseException as error:  # handed over to the test's own thread
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{function.__name__} still runs after {seconds} s"
    if errors:
        raise errors[0]


def _served_server(size=1):
    server = Server(size, 30, SECRET)
    server.hosts = {r: "node" for r in range(size)}
    return server


def _check_reply(reply):
    assert reply.startswith("cmd=") and reply.endswith("\n") and reply.count("\n") == 1
    assert len(reply) <= MAX_LINE
    parse(reply[:-1].encode())


def test_fuzzed_lines_give_only_documented_errors_and_one_line_answers():
    """A few thousand random and mutated lines through the parser, the PMI command handler and
    the socket line reader: a ProtocolError or a one-line answer, never anything else, within
    bounded time (a hang fails after 60 s) and memory."""
    _within(60, _fuzz, seed=24)


def _fuzz(seed):
    rng = random.Random(seed)
    server = _served_server()
    valid = [b"cmd=init pmi_version=1 pmi_subversion=1", b"cmd=get_maxes", b"cmd=get_appnum",
             b"cmd=get_my_kvsname", b"cmd=get_universe_size", b"cmd=barrier_in",
             b"cmd=put kvsname=k key=bc-0 value=description#0", b"cmd=get kvsname=k key=bc-0",
             b"cmd=get kvsname=k key=PMI_process_mapping", b"cmd=finalize",
             b"cmd=mpigrad_abort_request code=1"]
    alphabet = b"cmd=key value \\=_-/#\x00\x7f\xff\t\r" + bytes(range(32, 127))
    answered = refused = 0
    tracemalloc.start()
    start = time.monotonic()
    for case in range(4000):
        kind = case % 4
        if kind == 0:
            line = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        elif kind == 1:
            line = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 6)):
                position = rng.randrange(len(line) + 1)
                action = rng.randrange(3)
                if action == 0 and line:
                    del line[min(position, len(line) - 1)]
                elif action == 1:
                    line.insert(position, rng.choice(alphabet))
                else:
                    line[position:position] = rng.choice(valid)[:rng.randrange(1, 12)]
            line = bytes(line)
        elif kind == 2:
            line = rng.choice(valid) + b" value=" + b"x" * rng.randrange(0, 3 * MAX_LINE)
        else:
            words = [b"cmd=" + rng.choice([b"put", b"get", b"nonsense", b"finalize"])]
            words += [b"%s=%s" % (rng.choice([b"key", b"value", b"kvsname", b"x"]),
                                  b"v" * rng.choice([0, 1, 255, 256, 257, 1024, 1025]))
                      for _ in range(rng.randrange(0, 4))]
            line = b" ".join(words)
        line = line.replace(b"\n", b"")
        try:
            fields = parse(line)
        except ProtocolError:
            refused += 1
            continue
        if fields["cmd"] == "abort":
            continue  # ends the job; not an answer
        _check_reply(server.answer(0, fields))
        answered += 1
    reader_cases = 0
    left, right = socket.socketpair()
    with left, right:
        reader = pmi_server.LineReader(right)
        for _ in range(300):
            chunk = bytes(rng.choice(alphabet + b"\n\n\n") for _ in range(rng.randrange(1, 900)))
            left.sendall(chunk)
            while True:  # every whole line of what has arrived, or the error
                try:
                    reader.line(time.monotonic() + 0.005)
                    reader_cases += 1
                except ProtocolError:
                    reader = pmi_server.LineReader(right)  # the server closes such a connection
                except socket.timeout:
                    break
                assert len(reader.buffer) <= MAX_LINE + 1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert answered > 1000 and refused > 1000 and reader_cases > 100
    assert peak < 4 * 2 ** 20
    assert time.monotonic() - start < 30
    assert len(server.kvs) <= pmi_server.MAX_KEYS_PER_RANK


def test_key_value_space_is_bounded_and_keys_belong_to_who_put_them():
    server = _served_server(size=2)

    def put(rank, key, value):
        return server.answer(rank, {"cmd": "put", "key": key, "value": value})

    assert put(0, "bc-0", "card") == "cmd=put_result rc=0\n"
    assert put(0, "bc-0", "new card") == "cmd=put_result rc=0\n"
    assert "key_put_by_another_rank" in put(1, "bc-0", "forged")
    assert server.answer(1, {"cmd": "get", "key": "bc-0"}) == "cmd=get_result rc=0 value=new card\n"
    assert "longer_than_maxes" in put(0, "k" * (pmi_server.KEYLEN_MAX + 1), "v")
    assert "longer_than_maxes" in put(0, "k", "v" * (pmi_server.VALLEN_MAX + 1))
    assert "reserved_key" in put(0, "PMI_process_mapping", "(vector,(0,1,9))")
    assert "needs_a_key" in server.answer(0, {"cmd": "put", "key": "k"})
    for i in range(1, pmi_server.MAX_KEYS_PER_RANK):
        assert put(0, f"k{i}", "v") == "cmd=put_result rc=0\n"
    assert "too_many_keys" in put(0, "one-more", "v")
    assert put(1, "bc-1", "card") == "cmd=put_result rc=0\n"
    assert server.answer(0, {"cmd": "get", "key": "PMI_process_mapping"}) == \
        "cmd=get_result rc=0 value=(vector,(0,1,2))\n"


def test_a_barrier_counts_each_rank_once():
    server = _served_server(size=2)
    first = [threading.Thread(target=server.barrier, args=(0,), daemon=True) for _ in range(2)]
    for thread in first:
        thread.start()
    time.sleep(0.3)
    assert all(thread.is_alive() for thread in first), "rank 0 twice released the barrier"
    server.barrier(1)
    for thread in first:
        thread.join(5)
        assert not thread.is_alive()


def test_the_job_secret_comes_from_the_environment_or_torchruns_run_id():
    assert rendezvous.job_secret({}) == ""
    assert rendezvous.job_secret({"TORCHELASTIC_RUN_ID": "none"}) == ""
    standalone = rendezvous.job_secret({"TORCHELASTIC_RUN_ID": "a6cd-5ad1"})
    assert standalone and "a6cd-5ad1" in standalone
    assert rendezvous.job_secret({"TORCHELASTIC_RUN_ID": "a6cd-5ad1",
                                  "MPIGRAD_RENDEZVOUS_SECRET": "s"}) == "s"
    assert proof("a", "nonce", "x") != proof("b", "nonce", "x") != proof("a", "other", "x")


# ---------------------------------------------------------------------- a server in a thread
@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(pmi_server, "FIRST_LINE_SECONDS", 0.5)
    listener = pmi_server.listen("127.0.0.1", 0)
    server = Server(2, 60, SECRET)
    server.address = ("127.0.0.1", listener.getsockname()[1])
    thread = threading.Thread(target=server.run, args=(listener,), daemon=True)
    thread.start()
    yield server
    server.abort("1", -1)
    thread.join(5)


def _deadline():
    return time.monotonic() + 10


def _check_in_all(server, secret=SECRET):
    """Both ranks' control connections, as the ranks open them."""
    controls, errors = {}, []

    def check_in(rank):
        try:
            controls[rank], _, _ = rendezvous._check_in(rendezvous.Request(rank, 2),
                                                        *server.address, secret, _deadline(), 10)
        except RuntimeError as error:
            errors.append(error)

    threads = [threading.Thread(target=check_in, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    if errors:
        raise errors[0]
    return controls


def _open_pmi(server, rank, secret=SECRET):
    return rendezvous._open_pmi_connection(rendezvous.Request(rank, 2), *server.address, secret,
                                           _deadline(), 10)


def _stranger(server, line):
    """What the server answers a stranger whose first line is `line` (or `line(nonce)`, given
    the challenge's nonce): the lines it sent after its challenge until it closed the
    connection (None if it was not listening, or stopped listening with this connection in
    its queue, which the kernel then closes or resets before any challenge)."""
    try:
        conn = socket.create_connection(server.address, timeout=5)
    except ConnectionRefusedError:
        return None
    with conn:
        reader = pmi_server.LineReader(conn)
        try:
            first = reader.line(time.monotonic() + 5)
        except ConnectionResetError:
            first = None
        if first is None:  # closed (or reset) before its challenge
            return None
        challenge = parse(first)
        assert challenge["cmd"] == "mpigrad_challenge"
        text = line(challenge["nonce"]) if callable(line) else line
        replies = []
        try:
            conn.sendall((text if isinstance(text, bytes) else text.encode()) + b"\n")
            while (reply := reader.line(time.monotonic() + 5)) is not None:
                replies.append(reply.decode())
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed before it read everything: what was too long
        return replies


def _proven(command, rank, secret=SECRET, size="", host=""):
    """The first line of a client that knows `secret`, as a function of the challenge."""
    words = [command, rank, size, host, "c"]
    extra = f" size={size} host={host}" if size else ""
    return lambda nonce: (f"cmd={command} rank={rank}{extra} nonce=c "
                          f"proof={proof(secret, nonce, *words)}")


def _eventually(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _quiet(conn):
    """Whether nothing arrives on a rank's connection for a moment."""
    conn.settimeout(0.2)
    try:
        return conn.recv(1) == b"never"
    except socket.timeout:
        return True
    finally:
        conn.settimeout(None)


@pytest.mark.mpi_skip
def test_hellos_without_the_secret_are_refused_alone(server):
    wrong = "cmd=mpigrad_hello rank=0 size=2 host=x nonce=c proof=" + "0" * 64
    assert _stranger(server, wrong) == [
        "cmd=mpigrad_refused reason=the_rendezvous_secret_does_not_match_rank_0's"]
    assert _stranger(server, "cmd=mpigrad_hello rank=0 size=2 host=x") == [
        "cmd=mpigrad_refused reason=the_rendezvous_secret_does_not_match_rank_0's"]
    with pytest.raises(RuntimeError, match="secret does not match rank 0's"):
        rendezvous._check_in(rendezvous.Request(1, 2), *server.address, "a guess",
                             _deadline(), 10)
    assert server.refused is None and not server.hosts
    assert sorted(_check_in_all(server)) == [0, 1]


@pytest.mark.mpi_skip
def test_fuzzed_first_lines_are_closed_alone_and_the_world_still_forms(server):
    rng = random.Random(2024)
    seeds = [b"cmd=mpigrad_hello rank=0 size=2 host=x nonce=c proof=" + b"0" * 64,
             b"cmd=mpigrad_pmi rank=1 nonce=c proof=" + b"f" * 64, b"cmd=initack pmiid=0",
             b"cmd=mpigrad_abort_request code=3", b"cmd=abort exitcode=1", b"cmd=barrier_in"]
    for case in range(300):
        line = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(0, 8)):
            line.insert(rng.randrange(len(line) + 1), rng.randrange(256))
        if case % 10 == 0:
            line += b"x" * rng.randrange(MAX_LINE, 4 * MAX_LINE)
        replies = _stranger(server, bytes(line))
        assert all(reply.startswith("cmd=mpigrad_refused ") for reply in replies), replies
    assert server.refused is None and server.aborted is None and not server.hosts
    assert sorted(_check_in_all(server)) == [0, 1]


@pytest.mark.mpi_skip
def test_a_hello_after_the_world_formed_is_refused_and_the_ranks_hear_nothing(server):
    controls = _check_in_all(server)
    # Even with the secret (a stray process of the job itself): the world is there already.
    for rank, size in [(0, 2), (1, 3), (7, 2)]:
        assert _stranger(server, _proven("mpigrad_hello", rank, size=size, host="x")) == [
            "cmd=mpigrad_refused reason=the_world_has_formed_already"]
    assert server.refused is None and server.aborted is None
    assert all(_quiet(conn) for conn in controls.values())


@pytest.mark.mpi_skip
def test_pmi_connections_only_for_formed_ranks_in_range_and_once(server):
    def pmi(rank, secret=SECRET):
        return _stranger(server, _proven("mpigrad_pmi", rank, secret))

    refused = ["cmd=mpigrad_refused reason=not_a_rank_without_a_PMI_connection"]
    assert pmi(0) == refused  # before the world has formed
    controls = _check_in_all(server)
    assert pmi(2) == refused and pmi(77) == refused and pmi(-1) == refused
    assert _stranger(server, "cmd=mpigrad_pmi rank=0") == [
        "cmd=mpigrad_refused reason=the_rendezvous_secret_does_not_match_rank_0's"]
    assert pmi(0, secret="a guess") == [
        "cmd=mpigrad_refused reason=the_rendezvous_secret_does_not_match_rank_0's"]
    # What MPI's own PMI client would send, connecting by itself: not accepted any more.
    assert _stranger(server, "cmd=initack pmiid=0") == []
    first = _open_pmi(server, 0)
    with pytest.raises(RuntimeError, match="not a rank without a PMI connection"):
        _open_pmi(server, 0)
    second = _open_pmi(server, 1)
    first.sendall(b"cmd=get_maxes\n")
    assert pmi_server.LineReader(first).line(time.monotonic() + 5).startswith(b"cmd=maxes")
    # Every rank has its two connections: the server stops listening.
    assert _eventually(lambda: pmi(0) is None)
    assert all(_quiet(conn) for conn in controls.values())
    first.close(), second.close()


GOODBYE = b"cmd=mpigrad_goodbye\n"


def _next_line(conn):
    return pmi_server.LineReader(conn).line(time.monotonic() + 5)


@pytest.mark.mpi_skip
def test_ranks_that_say_goodbye_end_quietly_and_the_server_with_the_last(server):
    controls = _check_in_all(server)
    controls[0].sendall(GOODBYE)
    controls[0].close()
    assert _eventually(lambda: 0 in server.gone)
    assert _quiet(controls[1]) and not server.finished()
    controls[1].sendall(GOODBYE)
    controls[1].close()
    assert _eventually(server.finished) and server.aborted is None


@pytest.mark.mpi_skip
def test_a_rank_gone_without_a_goodbye_is_named_to_the_others_as_crashed(server):
    controls = _check_in_all(server)
    controls[1].close()
    assert _next_line(controls[0]) == b"cmd=mpigrad_crashed rank=1"
    assert server.aborted == "1"


@pytest.mark.mpi_skip
@pytest.mark.parametrize("barrier_first", [True, False])
def test_a_rank_gone_after_its_goodbye_but_awaited_in_a_barrier_crashed(server, barrier_first):
    # MPI_Finalize's PMI barrier comes after the goodbye: a rank killed in between leaves
    # the others waiting in it, whether they entered it before or after it went.
    controls = _check_in_all(server)
    pmi = [_open_pmi(server, rank) for rank in range(2)]
    if barrier_first:
        pmi[0].sendall(b"cmd=barrier_in\n")
        assert _eventually(lambda: server.barrier_ranks == {0})
    controls[1].sendall(GOODBYE)
    controls[1].close()
    pmi[1].close()
    if not barrier_first:
        assert _eventually(lambda: 1 in server.gone)
        pmi[0].sendall(b"cmd=barrier_in\n")
    assert _next_line(controls[0]) == b"cmd=mpigrad_crashed rank=1"
    assert _next_line(pmi[0]) == b"cmd=barrier_out"  # released rather than kept waiting
    pmi[0].close()


@pytest.mark.mpi_skip
def test_the_server_returns_once_the_job_is_over_and_its_notices_are_out(monkeypatch):
    # Nothing in `run` polls: the abort wakes it although its joining deadline is an hour
    # away, and it returns only once the abort's notice has gone to every rank.
    listener = pmi_server.listen("127.0.0.1", 0)
    server = Server(2, 3600, SECRET)
    server.address = ("127.0.0.1", listener.getsockname()[1])
    returned = threading.Event()
    thread = threading.Thread(target=lambda: (server.run(listener), returned.set()),
                              daemon=True)
    thread.start()
    controls = _check_in_all(server)
    sending, go_on = threading.Event(), threading.Event()
    send = pmi_server._send

    def held_send(conn, text):
        sending.set()
        go_on.wait(60)
        send(conn, text)

    monkeypatch.setattr(pmi_server, "_send", held_send)
    threading.Thread(target=server.abort, args=("3", -1), daemon=True).start()
    assert sending.wait(60)
    assert not returned.wait(0.5), "run returned before the abort's notice was sent"
    go_on.set()
    thread.join(60)
    assert returned.is_set()
    for conn in controls.values():
        assert _next_line(conn) == b"cmd=mpigrad_abort code=3 rank=-1"
        conn.close()


@pytest.mark.mpi_skip
def test_a_rank_does_not_talk_to_a_server_without_the_secret():
    listener = pmi_server.listen("127.0.0.1", 0)

    def impostor():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"cmd=mpigrad_challenge nonce=n\n")
            pmi_server.LineReader(conn).line(time.monotonic() + 5)
            conn.sendall(b"cmd=mpigrad_welcome proof=" + b"0" * 64 + b"\n")

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    with listener, pytest.raises(RuntimeError, match="does not know this job's rendezvous"):
        rendezvous._check_in(rendezvous.Request(0, 2), *listener.getsockname(), SECRET,
                             _deadline(), 10)
    thread.join(5)


@pytest.mark.mpi_skip
def test_an_over_long_line_is_cut_off_with_bounded_memory(server):
    chunk = b"x" * 65536
    conn = socket.create_connection(server.address, timeout=5)
    tracemalloc.start()
    sent = 0
    # The kernel's buffers take up to 36 MiB here (tcp_rmem and tcp_wmem) before the server
    # has read a byte; past them, only a server reading it all would let 64 MiB through.
    with conn, pytest.raises(OSError):
        while sent < 64 * 2 ** 20:
            conn.sendall(chunk)
            sent += len(chunk)
        conn.recv(1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 ** 20
    assert sorted(_check_in_all(server)) == [0, 1]


@pytest.mark.mpi_skip
def test_a_first_line_dribbled_byte_by_byte_is_cut_off_at_its_deadline(server):
    start = time.monotonic()
    with socket.create_connection(server.address, timeout=5) as conn, \
            pytest.raises(OSError):
        for byte in b"cmd=mpigrad_hello rank=0 size=2 host=" + b"x" * 100:
            conn.sendall(bytes([byte]))
            time.sleep(0.05)
        assert False, "the server was still reading after 5.4 s"
    # Sending it all takes 5.4 s.
    assert time.monotonic() - start < pmi_server.FIRST_LINE_SECONDS + 4


@pytest.mark.mpi_skip
def test_200_idle_connections_cost_a_bounded_number_of_threads_and_time_out(server):
    threads_before = threading.active_count()
    idle = [socket.create_connection(server.address, timeout=5) for _ in range(200)]
    time.sleep(0.2)
    assert threading.active_count() - threads_before <= pmi_server.MAX_PENDING
    time.sleep(pmi_server.FIRST_LINE_SECONDS + 0.5)
    for conn in idle:
        data = b""
        while chunk := conn.recv(4096):  # the challenge, if it was sent, then the close
            data += chunk
        assert data == b"" or (data.startswith(b"cmd=mpigrad_challenge nonce=")
                               and data.count(b"\n") == 1)
        conn.close()
    assert _eventually(lambda: threading.active_count() <= threads_before)
    assert sorted(_check_in_all(server)) == [0, 1]


@pytest.mark.mpi_skip
@pytest.mark.parametrize("master_addr, expected", [("localhost", LOOPBACK),
                                                     ("127.0.0.1", LOOPBACK),
                                                     ("0.0.0.0", WILDCARD)])
def test_the_server_listens_where_master_addr_says(master_addr, expected, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    port = rendezvous._start_server(master_addr, 0, 2, 3.0, SECRET)
    server = rendezvous._control.pop("server")
    try:
        listening = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as file:
                for row in list(file)[1:]:
                    local, state = row.split()[1], row.split()[3]
                    address, _, hex_port = local.partition(":")
                    if state == "0A" and int(hex_port, 16) == port:
                        listening.append(address)
        assert listening and set(listening) <= expected, listening
    finally:
        server.kill()
        server.wait()


@pytest.mark.mpi_skip
def test_a_master_addr_that_is_not_this_host_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match=r"on 192\.0\.2\.1:\d+: error: cannot listen.*"
                                           r"a MASTER_ADDR that names this host"):
        rendezvous._start_server("192.0.2.1", 0, 2, 3.0, SECRET)  # TEST-NET-1: nobody's


@pytest.mark.mpi_skip
def test_a_loopback_master_addr_for_ranks_on_several_hosts_is_named_at_once(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.warns(RuntimeWarning, match=r"MASTER_ADDR=localhost is .* a loopback address, "
                                            r"but only 2 of the 4 ranks run under this "
                                            r"launcher .* other hosts cannot reach"):
        rendezvous._start_server("localhost", 0, 4, 3.0, SECRET)
    server = rendezvous._control.pop("server")
    server.kill()
    server.wait()


@pytest.mark.mpi_skip
def test_file_rendezvous_shares_a_secret_only_its_user_can_read(tmp_path):
    meeting = tmp_path / "meet"
    # MPI starts after the join, as in a script that sets the variables itself.
    code = ("import sys, mpi4py; mpi4py.rc.initialize = False; "
            "from mpigrad.distributed.launch import rendezvous as r; "
            "r.join(r.Request(int(sys.argv[1]), 2, path=sys.argv[2])); "
            "from mpi4py import MPI; MPI.Init(); c = MPI.COMM_WORLD; "
            "print(c.Get_rank(), c.Get_size(), c.allreduce(c.Get_rank() + 1)); MPI.Finalize()")
    processes = [subprocess.Popen([sys.executable, "-c", code, str(rank), str(meeting)],
                                  env=launcher_free_environment(), text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for rank in range(2)]
    results = [process.communicate(timeout=60) for process in processes]
    assert [out.split() for out, _ in results] == [["0", "2", "3"], ["1", "2", "3"]], results
    assert not meeting.exists()  # removed by rank 0 once both had read it
    # What rank 0 writes, seen before anyone reads it.
    host, port, secret, _ = rendezvous._write_rendezvous_file(
        rendezvous.Request(0, 2, path=str(meeting)), "", timeout=5)
    server = rendezvous._control.pop("server")
    server.kill()
    server.wait(10)
    assert meeting.stat().st_mode & 0o777 == 0o600
    assert meeting.read_text() == f"{host}:{port}\n{secret}\n" and len(secret) >= 32
