"""DDP step time over one link, with and without compression, against PyTorch DDP (gloo).

    # shared memory (one host, 2 ranks):
    mpiexec -n 2 python jobs/bench/bench_link.py --link shm --out runs/bench-shm.json
    # the simulated cluster, 2 hosts x 1 rank (jobs/tools/cluster.py; RATE 1gbit or 10gbit):
    python jobs/tools/cluster.py up --rate 1gbit
    python jobs/tools/cluster.py run --venv /tmp/mpigrad-ompi-venv --per-host 1 -- \
        python jobs/bench/bench_link.py --link 1gbit --master-addr 10.77.0.1 --cluster-prefix mgh \
        --out runs/bench-1gbit.json
    # 2 hosts x 2 ranks: DDP's default sums each host's shared buckets slice by slice across
    # hosts; "hierarchical" is the MPI rounds it replaced, "flat" one Iallreduce
    python jobs/tools/cluster.py run --venv /tmp/mpigrad-ompi-venv --per-host 2 -- \
        python jobs/bench/bench_link.py --link 1gbit-2x2 --cluster-prefix mgh \
        --only default hierarchical flat --no-torch

Model: the MLP 784-1024-1024-1024-10 (float32, ReLU, cross-entropy), batch 64 per rank, SGD
with momentum, one BLAS thread per rank. Configurations:

  mpigrad  none (the same step without DDP), default (DDP's own reduction: where ranks
           share hosts, buckets in each host's shared memory, each slice summed across hosts
           by its owners), shared-ring and shared-mpi (the same, the slices crossing hosts by
           mpigrad's ring or the library's Iallreduce, instead of whichever was timed faster),
           hierarchical (DDP's default with MPIGRAD_DDP_SHARED_MEMORY=0: MPI rounds, hierarchical
           when ranks share hosts; hierarchical-ring, hierarchical-mpi: across hosts by the
           ring or the library), flat (one Iallreduce per bucket, always), ring (mpigrad's
           own ring of nonblocking messages), fp16, bf16,
           powerSGD (rank 4), topk (1% of each bucket, error feedback)
  PyTorch  default, fp16, powerSGD (rank 4): torch DDP over gloo on the same link
           (GLOO_SOCKET_IFNAME: the host's one non-loopback interface, else lo)

PowerSGD starts at iteration 2 in both (after DDP's bucket rebuild); warm-up steps are not
timed. Rounds alternate the configurations (the machine may be shared); each configuration's
time is the median over rounds of the slowest rank's mean step. For the cost model
(jobs/tools/cost_model.py, `report` on the JSON written here) each round also times ping-pong and
Allreduce over the link, and the no-communication step is split into forward, backward and
optimizer.
"""
from harness import (BATCH, SIZES, MlpStep, init_torch_gloo, mlp,  # first: sets threads
                     timed)
from harness import TorchRun as TorchStep

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from mpigrad.distributed.algorithms.ddp_comm_hooks.hierarchical import CROSS_HOST_ENV  # noqa
from mpigrad.distributed.algorithms.ddp_comm_hooks.shared_memory import ENV as SHARED_ENV  # noqa
from mpigrad.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd  # noqa: E402
from mpigrad.distributed.algorithms.ddp_comm_hooks.topk_hooks import TopKState, topk_hook  # noqa
from mpigrad.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from mpigrad.optim import SGD  # noqa: E402

# The link's cost model and the simulated cluster are tools of their own, run on their own too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import cost_model  # noqa: E402
from cluster import Cluster  # noqa: E402
from ddp_reduction import reduction  # noqa: E402

WARMUP = 4


# DDP's default reduction made with these variables set (DDP reads them at construction).
DEFAULT_VARIANTS = {"shared-ring": {CROSS_HOST_ENV: "ring"},
                    "shared-mpi": {CROSS_HOST_ENV: "mpi"},
                    "hierarchical": {SHARED_ENV: "0"},
                    "hierarchical-ring": {SHARED_ENV: "0", CROSS_HOST_ENV: "ring"},
                    "hierarchical-mpi": {SHARED_ENV: "0", CROSS_HOST_ENV: "mpi"}}


def mpigrad_hooks():
    return {"default": (None, None),
            **{name: (None, None) for name in DEFAULT_VARIANTS},
            "flat": (None, default_hooks.allreduce_hook),
            "ring": (None, default_hooks.ring_allreduce_hook),
            "fp16": (None, default_hooks.fp16_compress_hook),
            "bf16": (None, default_hooks.bf16_compress_hook),
            "powerSGD": (powersgd.PowerSGDState(None, matrix_approximation_rank=4,
                                                start_powerSGD_iter=2), powersgd.powerSGD_hook),
            "topk": (TopKState(ratio=0.01), topk_hook)}


class MpigradRun(MlpStep):
    def __init__(self, rank, hook=None, environment=None):
        model = mlp(mg)
        if hook is not None:
            with mock.patch.dict(os.environ, environment or {}):
                model = DDP(model)
            if hook[1] is not None:
                model.register_comm_hook(*hook)
        super().__init__(rank, model, SGD(model.parameters(), lr=0.01, momentum=0.9))

    def phases(self, steps):
        """Mean seconds of forward, backward and optimizer step."""
        totals = np.zeros(3)
        for _ in range(steps):
            t0 = time.perf_counter()
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(self.x), self.y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            self.opt.step()
            totals += (t1 - t0, t2 - t1, time.perf_counter() - t2)
        return dict(zip(("forward", "backward", "optimizer"), (totals / steps).tolist()))


class TorchRun(TorchStep):
    def __init__(self, torch, rank, hook):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as tdefault
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as tpowersgd
        # PyTorch's PowerSGD on gloo issues its second and third allreduce from completion
        # callbacks, whose order between buckets differs across ranks: with several buckets
        # gloo fails ("collective mismatch"). An explicit bucket_cap_mb makes it one bucket.
        super().__init__(torch, rank, **({"bucket_cap_mb": 25} if hook == "powerSGD" else {}))
        if hook == "fp16":
            self.model.register_comm_hook(None, tdefault.fp16_compress_hook)
        elif hook == "powerSGD":
            state = tpowersgd.PowerSGDState(process_group=None, matrix_approximation_rank=4,
                                            start_powerSGD_iter=2)
            self.model.register_comm_hook(state, tpowersgd.powerSGD_hook)


def gloo_interface():
    """The one non-loopback interface of this host's network namespace, or lo."""
    names = [name for _, name in socket.if_nameindex() if name != "lo"]
    return names[0] if len(names) == 1 else "lo"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--link", required=True, help="a name for the link (shm, 1gbit, ...)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--only", nargs="*", help="mpigrad configurations to run")
    parser.add_argument("--torch-only", nargs="*", help="PyTorch configurations to run")
    parser.add_argument("--cluster-prefix", help="on jobs/tools/cluster.py's hosts (e.g. mgh): "
                        "count the bytes that cross the link per step")
    parser.add_argument("--out", help="write the results as JSON here (rank 0)")
    args = parser.parse_args()

    dist.init_process_group()
    comm = MPI.COMM_WORLD.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    hooks = mpigrad_hooks()
    runs = {("mpigrad", "none"): MpigradRun(rank)}
    for name, hook in hooks.items():
        if not args.only or name in args.only:
            runs[("mpigrad", name)] = MpigradRun(rank, hook, DEFAULT_VARIANTS.get(name))
    if not args.no_torch:
        torch = init_torch_gloo(comm, args.master_addr, gloo_interface())
        for name in args.torch_only or ("default", "fp16", "powerSGD"):
            runs[("torch", name)] = TorchRun(torch, rank, name)
    for run in runs.values():
        for _ in range(WARMUP):
            run.step()
    times = {key: [] for key in runs}
    link_bytes = {key: [] for key in runs}
    cluster = Cluster(prefix=args.cluster_prefix) if args.cluster_prefix and rank == 0 else None
    samples = []
    for _ in range(args.rounds):
        for key, run in runs.items():
            before = sum(cluster.link_bytes()) if cluster else 0
            times[key].append(timed(comm, run.step, args.steps))
            if cluster:
                link_bytes[key].append((sum(cluster.link_bytes()) - before) / args.steps)
        samples.append(cost_model.link_samples(comm))
    phases = runs[("mpigrad", "none")].phases(args.steps)
    phases = {k: max(comm.allgather(v)) for k, v in phases.items()}
    step_ms = {key: statistics.median(t) * 1e3 for key, t in times.items()}
    hosts = comm.allgather(MPI.Get_processor_name())
    # Every rank's: in MPI rounds only each host's first rank sums across hosts.
    reductions = {name: comm.allgather(reduction(run.model)) for (who, name), run in runs.items()
                  if who == "mpigrad" and name in ("default", *DEFAULT_VARIANTS)}
    if not args.no_torch:
        torch.distributed.destroy_process_group()
    if rank == 0:
        result = {"link": args.link, "ranks": size, "hosts": sorted(set(hosts)),
                  "library": MPI.Get_library_version().splitlines()[0],
                  "model": "-".join(map(str, SIZES)), "batch_per_rank": BATCH,
                  "steps": args.steps, "rounds": args.rounds, "compute": phases,
                  **cost_model.median_samples(samples), "codec": cost_model.codec_costs(),
                  "mpigrad": {n: ms for (who, n), ms in step_ms.items() if who == "mpigrad"},
                  "torch": {n: ms for (who, n), ms in step_ms.items() if who == "torch"},
                  "ratios": round_ratios(times), "reductions": reductions,
                  "rounds_ms": {f"{who} {n}": [t * 1e3 for t in ts]
                                for (who, n), ts in times.items()}}
        if cluster:
            result["link_MB_per_step"] = {f"{who} {n}": statistics.median(b) / 1e6
                                          for (who, n), b in link_bytes.items()}
        print_table(result)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
    dist.destroy_process_group()


def round_ratios(times):
    """Each mpigrad configuration's step over the same round's no-communication step, over
    the same round's hierarchical MPI rounds (when run) and over the same round's PyTorch
    configuration of that name: medians of the rounds' own ratios, which a slow spell of the
    shared machine, hitting one round, leaves alone."""
    none = times[("mpigrad", "none")]
    hierarchical = times.get(("mpigrad", "hierarchical"))
    ratios = {}
    for (who, name), seconds in times.items():
        if who != "mpigrad":
            continue
        ratios[name] = {"none": statistics.median(a / b for a, b in zip(seconds, none))}
        if hierarchical is not None:
            ratios[name]["hierarchical"] = statistics.median(
                a / b for a, b in zip(seconds, hierarchical))
        if ("torch", name) in times:
            ratios[name]["torch"] = statistics.median(
                a / b for a, b in zip(seconds, times[("torch", name)]))
    return ratios


def print_table(result):
    mp, th, ratios = result["mpigrad"], result["torch"], result["ratios"]
    print(f"link {result['link']}: {result['ranks']} ranks on {len(result['hosts'])} host(s), "
          f"{result['library']}; MLP {result['model']}, batch {result['batch_per_rank']}/rank; "
          f"median of {result['rounds']} rounds x {result['steps']} steps; ratios are medians "
          "of each round's own ratio")
    print(f"{'configuration':17s} {'mpigrad ms':>10s} {'/ none':>7s} {'/ hierarchical':>14s} "
          f"{'PyTorch ms':>11s} {'mpigrad/PyTorch':>16s}")
    for name, ms in mp.items():
        torch_ms = th.get(name)
        against_torch = ratios[name].get("torch")
        against_rounds = ratios[name].get("hierarchical")
        ratio = f"{against_torch:16.2f}" if against_torch else f"{'':16s}"
        rounds = f"{against_rounds:14.3f}" if against_rounds else f"{'':14s}"
        torch_col = f"{torch_ms:11.1f}" if torch_ms else f"{'':11s}"
        print(f"{name:17s} {ms:10.1f} {ratios[name]['none']:7.2f} {rounds} {torch_col} {ratio}")
    if "link_MB_per_step" in result:
        print("MB crossing the link per step (both directions): " + ", ".join(
            f"{k} {v:.1f}" for k, v in result["link_MB_per_step"].items()))
    if result["reductions"]:
        print("DDP's default reduction, by rank: " + "; ".join(
            f"{name} " + ", ".join(f"{k}={''.join(str(int(r[k])) for r in how)}"
                                   for k in how[0])
            for name, how in result["reductions"].items()))
    print("compute of the no-communication step (ms): " +
          ", ".join(f"{k} {v * 1e3:.1f}" for k, v in result["compute"].items()))


if __name__ == "__main__":
    main()
