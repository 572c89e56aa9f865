"""FSDP: a GPT training step with mpigrad's fully_shard against mpigrad's DDP and against
torch's fully_shard (FSDP2) over gloo, on the same model, batch and optimizer.

    OMP_NUM_THREADS=1 timeout 900 mpiexec -n 2 python jobs/bench/bench_fsdp.py

Model: models.py's nanoGPT (written once for both libraries: pre-norm blocks, causal
scaled_dot_product_attention, tied embedding and head), float32, AdamW; each rank its own
batch. Sharded runs apply fully_shard to every block, then to the model. Configurations run
in alternating rounds (the machine may be shared); each number is the median over rounds
of the slowest rank's mean step. Targets (issue 32): FSDP / DDP <= 1.25, FSDP / torch FSDP2
<= 0.8. Also printed: each rank's parameter + gradient + optimizer-state bytes after a step.
"""
import argparse
from harness import init_torch_gloo, timed  # first: sets threads

import statistics  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
from mpigrad.distributed.fsdp import fully_shard  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from models import gpt  # noqa: E402


class Step:
    """One AdamW training step of `model` (from `lib`) on this rank's batch."""

    def __init__(self, lib, model, idx, targets):
        self.lib, self.model = lib, model
        self.opt = lib.optim.AdamW(model.parameters(), lr=1e-4)
        self.idx, self.targets = lib.from_numpy(idx), lib.from_numpy(targets)

    def step(self):
        self.opt.zero_grad()
        logits = self.model(self.idx)
        self.lib.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]),
                                             self.targets.view(-1)).backward()
        self.opt.step()

    def state_bytes(self):
        def nbytes(t):
            return t.numel() * t.element_size()
        params = [getattr(p, "_local_tensor", p) for p in self.model.parameters()]
        total = sum(nbytes(p) for p in params)
        total += sum(nbytes(getattr(p.grad, "_local_tensor", p.grad)) for p in
                     self.model.parameters() if p.grad is not None)
        for values in self.opt.state.values():
            for v in values.values():
                v = getattr(v, "_local_tensor", v)
                if hasattr(v, "element_size") and v.dim() > 0:
                    total += nbytes(v)
        return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="sequences per rank")
    parser.add_argument("--no-torch", action="store_true", help="skip torch's FSDP2")
    args = parser.parse_args()
    vocab, block_size, heads = 65, 64, 4
    shape = (vocab, block_size, args.layers, heads, args.width)
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(rank)
    idx = rng.integers(0, vocab, (args.batch, block_size))
    targets = rng.integers(0, vocab, (args.batch, block_size))

    mg.manual_seed(0)
    sharded = gpt(mg, *shape)
    for block in sharded.h:
        fully_shard(block)
    fully_shard(sharded)
    mg.manual_seed(0)
    runs = {"mpigrad FSDP": Step(mg, sharded, idx, targets),
            "mpigrad DDP": Step(mg, DDP(gpt(mg, *shape)), idx, targets)}
    if not args.no_torch:
        torch = init_torch_gloo(comm)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard as torch_fully_shard
        torch.manual_seed(0)
        model = gpt(torch, *shape)
        mesh = init_device_mesh("cpu", (size,))
        for block in model.h:
            torch_fully_shard(block, mesh=mesh)
        torch_fully_shard(model, mesh=mesh)
        runs["torch FSDP2 (gloo)"] = Step(torch, model, idx, targets)
    for run in runs.values():
        for _ in range(2):
            run.step()
    times = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(timed(comm, run.step, args.steps))
    medians = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    memory = {name: max(comm.allgather(run.state_bytes())) for name, run in runs.items()}
    if rank == 0:
        n_params = sum(p.numel() for p in gpt(mg, *shape).parameters())
        print(f"FSDP benchmark: GPT {args.layers} layers x {args.width} wide "
              f"({n_params / 1e6:.2f} M parameters, float32), batch {args.batch} x "
              f"{block_size} per rank, AdamW, {size} ranks; median of {args.rounds} rounds x "
              f"{args.steps} steps")
        print(f"{'configuration':20s} {'step ms':>8s} {'params+grads+state MiB (max rank)':>34s}")
        for name in runs:
            print(f"{name:20s} {medians[name]:8.1f} {memory[name] / 2**20:34.2f}")
        fsdp = medians["mpigrad FSDP"]
        print(f"FSDP / DDP: {fsdp / medians['mpigrad DDP']:.2f} (target <= 1.25)")
        if "torch FSDP2 (gloo)" in medians:
            print(f"FSDP / torch FSDP2: {fsdp / medians['torch FSDP2 (gloo)']:.2f} "
                  f"(target <= 0.8)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
