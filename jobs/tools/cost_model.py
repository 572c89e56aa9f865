"""An alpha-beta-gamma cost model of DDP's step, fitted per link, checked against measured
step times, and extrapolated to many nodes.

    # 1. measure a link (2 ranks; on the simulated cluster through jobs/tools/cluster.py run):
    mpiexec -n 2 python jobs/tools/cost_model.py measure --link shm --out runs/link-shm.json
    python jobs/tools/cluster.py up --rate 1gbit
    python jobs/tools/cluster.py run --venv /tmp/mpigrad-ompi-venv --per-host 1 -- \
        python jobs/tools/cost_model.py measure --link 1gbit --out runs/link-1gbit.json
    # 2. or take the link samples bench_link.py records between its rounds; then fit,
    #    predict the benchmark's step times, compare, and extrapolate:
    python jobs/tools/cost_model.py report runs/bench-*.json

The model (all times in seconds, n in bytes, N ranks):

  point to point       t(n) = alpha + beta n                     (fitted to ping-pong)
  ring allreduce       2(N-1) alpha + 2(N-1)/N n beta + (N-1)/N n gamma
  allgather            (N-1) alpha + (N-1) n beta                (n: one rank's message)
  gamma                seconds per byte to add two arrays (measured: numpy, one core)

Per link the measured Allreduce of the MPI in use is also fitted, `t = a + b n`: its `b`
against the ring's 2(N-1)/N beta says how far the library's own algorithm is from
bandwidth-optimal on that link, and the prediction of a given N uses it.

DDP's step: forward, then backward during which each bucket's reduction starts when its
last gradient is ready (gradients become ready in proportion to the layers' sizes, from the
output back: backward time is spread over the parameters by size), reductions follow one
another on the link, and the optimizer step follows the later of backward's end and the last
reduction's end. CPU work of a hook (encoding, decoding, top-k selection, PowerSGD's products)
is added, not overlapped: the ranks have no spare core to hide it on. Neither is the
transport's own CPU time (copies, the TCP stack): `transport_cpu` seconds per byte sent, the
one parameter fitted to a step time (the default hook's, per link); every other method's
step is then a prediction.

  start_b = max(ready_b, end_{b-1}),  end_b = start_b + link_time(bytes_b)
  step    = forward + max(backward, end_last) + hook CPU + transport_cpu bytes + optimizer

forward/backward/optimizer are the no-communication step's, measured in the same run. Per
method: default = the library's Allreduce (its 2-rank fit, scaled to N ranks as a ring
scales); fp16/bf16 = half the bytes in a ring whose hops encode and decode; PowerSGD rank 4 = per weight matrix
(n + m) 4 numbers in two ring allreduces, vectors uncompressed; top-k 1% = (index, value)
pairs allgathered, so its bytes grow with N. Not modelled: contention between the two ranks
of a host for memory bandwidth, congestion in a switch, stragglers.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

SIZES = (784, 1024, 1024, 1024, 10)   # the benchmark's MLP
PING_SIZES = [2 ** k for k in range(3, 25, 3)]
ALLREDUCE_SIZES = [2 ** k for k in range(10, 25, 2)]


# ----------------------------------------------------------------------------- measuring
def _median_time(fn, repeats, comm=None):
    times = []
    for _ in range(repeats):
        if comm is not None:
            comm.Barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def link_samples(comm, repeats=5):
    """One-way ping-pong times and (slowest rank's) Allreduce times by message size in bytes,
    between ranks 0 and 1 of `comm`, and gamma (seconds per byte of a float32 add)."""
    from mpi4py import MPI  # initialises MPI: only when measuring
    rank = comm.Get_rank()
    ping = {}
    for n in PING_SIZES:
        buf = np.zeros(n, np.uint8)

        def pingpong():
            if rank == 0:
                comm.Send(buf, 1)
                comm.Recv(buf, 1)
            elif rank == 1:
                comm.Recv(buf, 0)
                comm.Send(buf, 0)
        pingpong()
        ping[n] = _median_time(pingpong, repeats, comm) / 2
    allreduce = {}
    for n in ALLREDUCE_SIZES:
        buf = np.ones(n // 4, np.float32)

        def reduce_all():
            comm.Allreduce(MPI.IN_PLACE, buf, MPI.SUM)
        reduce_all()
        allreduce[n] = max(comm.allgather(_median_time(reduce_all, repeats, comm)))
    a = np.ones(1 << 22, np.float32)
    b = np.ones_like(a)
    gamma = _median_time(lambda: np.add(a, b, out=a), repeats) / a.nbytes
    return {"pingpong": comm.bcast(ping, root=0), "allreduce": allreduce, "gamma": gamma}


def median_samples(rounds):
    """Per size, the median over rounds of `link_samples` results."""
    merged = {}
    for kind in ("pingpong", "allreduce", "gamma"):
        if kind == "gamma":
            merged[kind] = statistics.median(r[kind] for r in rounds)
        else:
            merged[kind] = {n: statistics.median(r[kind][n] for r in rounds)
                            for n in rounds[0][kind]}
    return merged


def measure(link, out, repeats):
    from mpi4py import MPI  # initialises MPI: only when measuring
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        sys.exit("measure runs on exactly 2 ranks (one per host on the cluster)")
    result = {"link": link, "library": MPI.Get_library_version().splitlines()[0],
              **link_samples(comm, repeats), "codec": codec_costs()}
    if comm.Get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps({k: v for k, v in result.items() if k in ("link", "gamma")}))


def codec_costs():
    """CPU seconds of the compressing hooks, measured on this machine: per float32 element,
    fp16/bf16 encode and decode (mpigrad's codecs) and top-k's selection (|x|, argpartition,
    the residual) with its dense sum; and a whole PowerSGD step's CPU (products,
    orthogonalization, error feedback) for the benchmark's MLP at rank 4, on one rank."""
    from mpigrad.distributed.algorithms.ddp_comm_hooks import compression  # needs mpigrad
    x = (np.random.default_rng(0).standard_normal(1 << 21) * 1e-5).astype(np.float32)
    out = np.empty_like(x)
    costs = {}
    for name, codec in (("fp16", compression.FLOAT16), ("bf16", compression.BFLOAT16)):
        message = np.empty(codec.header + x.size, np.uint16)
        costs[name] = {"encode": _median_time(lambda: codec.encode(x, message), 5) / x.size,
                       "decode": _median_time(lambda: codec.decode(message, out), 5) / x.size}

    def select_top_percent():
        corrected = x + out
        k = x.size // 100
        chosen = np.argpartition(np.abs(corrected), x.size - k)[x.size - k:]
        values = corrected[chosen]
        corrected[chosen] = 0
        out.fill(0)
        out[chosen] += values
    costs["topk"] = _median_time(select_top_percent, 5) / x.size
    costs["powerSGD"] = _median_time(_powersgd_steps_on_one_rank(6), 5)
    return costs


class _OneRankBucket:
    """What PowerSGD's step reads of a bucket, for the MLP's parameters in one bucket on a
    communicator of one rank, where its reductions cost nothing: timing the hook's own
    generator then gives its CPU work alone (products, orthogonalization, error feedback)."""

    def __init__(self, seed):
        from mpi4py import MPI
        rng = np.random.default_rng(seed)
        shapes = [s for n, m in zip(SIZES, SIZES[1:]) for s in ((m, n), (m,))]
        self.buf = (rng.standard_normal(sum(math.prod(s) for s in shapes)) * 1e-5).astype(
            np.float32)
        ends = np.cumsum([math.prod(s) for s in shapes])
        self._gradients = [self.buf[end - math.prod(s):end].reshape(s)
                           for s, end in zip(shapes, ends)]
        self.world_size = 1
        self._comm = MPI.COMM_SELF

    def index(self):
        return 0

    def is_last(self):
        return True

    def gradients(self):
        return list(self._gradients)

    def round_comms(self, n):
        return [self._comm] * n


def _powersgd_steps_on_one_rank(steps):
    """A function running the next of `steps` PowerSGD steps (rank 4, error feedback, warm
    start) of the benchmark's MLP, as `powerSGD_hook` runs them, on one rank: each on a
    bucket of new gradients, as in training (one bucket used again and again would feed the
    hook its own output)."""
    from mpi4py import MPI
    from mpigrad.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    buckets = iter([_OneRankBucket(seed) for seed in range(steps)])
    state = powersgd.PowerSGDState(None, matrix_approximation_rank=4, start_powerSGD_iter=2)

    def step():
        bucket = next(buckets)
        for requests in powersgd._power_step(state, bucket, bucket.buf, MPI.FLOAT):
            MPI.Request.Waitall(requests)
    return step


# ----------------------------------------------------------------------------- the model
class Link:
    """A fitted link: alpha, beta (point to point), the library's allreduce line, gamma."""

    def __init__(self, data):
        self.name = data["link"]
        self.beta, self.alpha = _fit(data["pingpong"])
        self.allreduce_b, self.allreduce_a = _fit(data["allreduce"])
        self.gamma = data["gamma"]
        self.codec = data["codec"]
        self.transport_cpu = 0.0  # see calibrate_transport_cpu

    def ring(self, n, world):
        if world == 1 or n == 0:
            return 0.0
        return (2 * (world - 1) * self.alpha + 2 * (world - 1) / world * n * self.beta
                + (world - 1) / world * n * self.gamma)

    def library_allreduce(self, n, world):
        """The measured (2-rank) library Allreduce, scaled to `world` ranks by the ring's
        shape: its inefficiency factor over the ring at N=2 is kept."""
        if world == 1 or n == 0:
            return 0.0
        measured2 = self.allreduce_a + self.allreduce_b * n
        return measured2 / self.ring(n, 2) * self.ring(n, world)

    def allgather(self, n, world):
        return (world - 1) * (self.alpha + n * self.beta) if world > 1 else 0.0


LARGE = 1 << 16


def _fit(samples):
    """(slope, intercept) of t = a + b n: b by least squares over the messages of at least
    64 KB (bandwidth), a as the median time of the messages under 64 KB (latency)."""
    points = sorted((int(n), t) for n, t in samples.items())
    large = [(n, t) for n, t in points if n >= LARGE]
    small = [t for n, t in points if n < LARGE]
    sizes, times = np.array(large, float).T
    slope = float(np.polyfit(sizes, times, 1)[0])
    return slope, float(statistics.median(small))


def layer_parameters():
    """(name, elements) in the order backward produces them: last layer first."""
    params = []
    for k in reversed(range(len(SIZES) - 1)):
        params.append((f"b{k}", SIZES[k + 1]))
        params.append((f"w{k}", SIZES[k] * SIZES[k + 1]))
    return params


def buckets(cap_bytes=25 << 20, first_cap=1 << 20):
    """DDP's bucket layout for the MLP (reducer.assign_buckets' rule, by size only)."""
    out, current, cap = [], [], first_cap
    for name, n in layer_parameters():
        nbytes = 4 * n
        if nbytes >= first_cap:
            out.append([(name, n)])
            continue
        if current and sum(4 * m for _, m in current) + nbytes > cap:
            out.append(current)
            current, cap = [], cap_bytes
        current.append((name, n))
    if current:
        out.append(current)
    return out


def reduction_time(link, bucket, world, method):
    """(link seconds, CPU seconds, bytes each rank sends) to reduce one bucket (a list of
    (name, elements)) with `method`. Link time overlaps backward; CPU time does not (no spare
    core: see above)."""
    elements = sum(n for _, n in bucket)
    nbytes = 4 * elements
    ring_share = 2 * (world - 1) / world
    if method == "default":
        return link.library_allreduce(nbytes, world), 0.0, ring_share * nbytes
    if method == "ring":
        return link.ring(nbytes, world), 0.0, ring_share * nbytes
    if method in ("fp16", "bf16"):
        # the ring of encoded chunks: per number, encode and decode at each reduce-scatter
        # hop, once more for the owner, and a decode at each all-gather hop
        codec = link.codec[method]
        cpu = elements * (ring_share / 2 * (codec["encode"] + 2 * codec["decode"])
                          + (codec["encode"] + codec["decode"]) / world
                          + ring_share / 2 * 4 * link.gamma)
        return link.ring(nbytes / 2, world), cpu, ring_share * nbytes / 2
    if method == "powerSGD":
        compressed = plain = 0
        for name, n in bucket:
            if name.startswith("w"):
                k = int(name[1:])
                compressed += (SIZES[k] + SIZES[k + 1]) * 4
            else:
                plain += n
        sent = 4 * (compressed + plain) + 4 * compressed
        return (link.ring(4 * (compressed + plain), world) + link.ring(4 * compressed, world),
                0.0, ring_share * sent)
    if method == "topk":
        k = math.ceil(0.01 * elements)
        cpu = elements * link.codec["topk"] + world * k * 4 * link.gamma
        return link.allgather(12 * k, world), cpu, (world - 1) * 12 * k
    raise ValueError(method)


def predict_step(link, world, method, compute):
    """Predicted step seconds from the bucket pipeline (see the module docstring).
    `compute` = {"forward", "backward", "optimizer"} seconds of the no-communication step."""
    if world == 1:
        return compute["forward"] + compute["backward"] + compute["optimizer"]
    total = sum(n for _, n in layer_parameters())
    done_elements, end, cpu, sent = 0, 0.0, 0.0, 0.0
    for bucket in buckets():
        done_elements += sum(n for _, n in bucket)
        ready = compute["backward"] * done_elements / total
        link_seconds, cpu_seconds, bucket_sent = reduction_time(link, bucket, world, method)
        end = max(ready, end) + link_seconds
        cpu += cpu_seconds
        sent += bucket_sent
    if method == "powerSGD":
        cpu += link.codec["powerSGD"]
    cpu += link.transport_cpu * sent
    return compute["forward"] + max(compute["backward"], end) + cpu + compute["optimizer"]


def calibrate_transport_cpu(link, data):
    """Set `link.transport_cpu` (CPU seconds per byte a rank sends, not hidden behind
    compute: the transport's copies and the TCP stack, on cores the ranks also compute on)
    from the default hook's measured step: the one number fitted to a step time."""
    link.transport_cpu = 0.0
    compute = measured_compute(data)
    missing = data["mpigrad"]["default"] / 1e3 - predict_step(link, 2, "default", compute)
    sent = sum(reduction_time(link, b, 2, "default")[2] for b in buckets())
    link.transport_cpu = max(missing, 0.0) / sent


def measured_compute(data):
    """The no-communication step's phases, scaled to sum to its measured median (the phases
    are timed once, the median over the interleaved rounds is the better total)."""
    phases = data["compute"]
    scale = data["mpigrad"]["none"] / 1e3 / sum(phases.values())
    return {k: v * scale for k, v in phases.items()}


METHODS = ("default", "fp16", "bf16", "powerSGD", "topk")


def report(paths):
    """Fit each link, print predicted against measured step times (for files written by
    bench_link.py, whose link samples were taken between its timing rounds) and the
    extrapolation to many nodes."""
    links, benches = {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if "pingpong" in data:
            links[data["link"]] = Link(data)
        if "mpigrad" in data and data["ranks"] == 2:  # the model's fits are 2-rank fits
            benches[data["link"]] = data
    model_bytes = 4 * sum(n for _, n in layer_parameters())
    print("Fitted links (alpha, beta: point to point; the library's Allreduce at 2 ranks as "
          "a + b n; gamma: a float32 add):")
    print(f"{'link':8s} {'alpha us':>9s} {'1/beta MB/s':>12s} {'AR a us':>8s} "
          f"{'AR MB/s':>8s} {'ring/AR':>8s} {'1/gamma GB/s':>13s}")
    for name, link in links.items():
        ratio = link.ring(model_bytes, 2) / link.library_allreduce(model_bytes, 2)
        print(f"{name:8s} {link.alpha * 1e6:9.1f} {1e-6 / link.beta:12.1f} "
              f"{link.allreduce_a * 1e6:8.1f} {1e-6 / link.allreduce_b:8.1f} {ratio:8.2f} "
              f"{1e-9 / link.gamma:13.2f}")
    print(f"(ring/AR: the bandwidth-optimal ring's predicted time over the library's fitted "
          f"Allreduce for the MLP's {model_bytes / 1e6:.2f} MB)")
    for name, data in benches.items():
        calibrate_transport_cpu(links[name], data)
        print(f"\nPredicted against measured step time, link {name}, 2 ranks (ms); transport "
              f"CPU {links[name].transport_cpu * 1e9:.2f} ns per byte sent, calibrated on "
              f"'default' (so its error is 0 by construction):")
        print(f"{'method':10s} {'predicted':>10s} {'measured':>9s} {'error':>7s}")
        for method in ("none",) + METHODS:
            if method not in data["mpigrad"]:
                continue
            world = 1 if method == "none" else 2
            predicted = predict_step(links[name], world, "default" if method == "none"
                                     else method, measured_compute(data)) * 1e3
            ms = data["mpigrad"][method]
            print(f"{method:10s} {predicted:10.1f} {ms:9.1f} {(predicted - ms) / ms:+7.0%}")
    for name, data in benches.items():
        link = links[name]
        compute = measured_compute(data)
        print(f"\nPredicted step time (ms) on N nodes over link {name}, one rank per node "
              f"(no communication: {predict_step(link, 1, 'default', compute) * 1e3:.1f})")
        print(f"{'N':>5s} " + " ".join(f"{m:>9s}" for m in ("ring",) + METHODS))
        for world in (2, 8, 64, 512):
            row = [predict_step(link, world, m, compute) * 1e3
                   for m in ("ring",) + METHODS]
            print(f"{world:5d} " + " ".join(f"{t:9.1f}" for t in row))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--link", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--repeats", type=int, default=7)
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+", help="bench_link.py results (or `measure` results)")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.link, args.out, args.repeats)
    else:
        report(args.files)


if __name__ == "__main__":
    main()
