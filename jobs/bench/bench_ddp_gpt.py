"""The user's number: jobs/train_gpt.py's GPT trained with DDP, mpigrad against torch (gloo).

    timeout 900 mpiexec -n 2 python jobs/bench/bench_ddp_gpt.py [--steps 10] [--rounds 5]

The GPT of jobs/train_gpt.py at its default configuration (read from its parser: 4 layers,
4 heads, width 64, context 64, batch 16 per rank), its vocabulary and one batch of windows
from its text (the standard library's sources), written once for both libraries
(models.gpt, the same architecture as train_gpt's GPT without its zero-probability dropout
modules), from the same weights. A step is train_gpt's: zero_grad, forward through
DistributedDataParallel, cross-entropy (ignore_index -1), backward (the gradients averaged
across ranks), clip_grad_norm_(--clip), AdamW with train_gpt's parameter groups, loss.item().
The lr schedule is left out (a few scalar operations per step in both).

Both libraries run in the same mpiexec job, one thread per rank (harness): mpigrad's DDP over
MPI and torch's DDP over gloo (started by harness.init_torch_gloo on localhost). After
--warmup steps each, they alternate round after round, which goes first alternating; a
round's time is the slowest rank's mean wall time over --steps steps (harness.timed). The
ratio printed is the median of the rounds' own ratios mpigrad / torch, with the median step
times of each. Target (issue 31): mpigrad's step <= 0.9x torch's.
"""
from harness import init_torch_gloo, timed, use_threads  # first: one thread per rank

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

from mpi4py import MPI  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
from models import gpt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import train_gpt  # noqa: E402  (jobs/: the job whose model and configuration are timed)

TARGET = 0.9


class DdpGptStep:
    """train_gpt's training step of `model` (from `lib`), wrapped in `lib`'s DDP."""

    def __init__(self, lib, model, x, y, config):
        self.lib, self.model, self.clip = lib, model, config.clip
        self.ddp = lib.nn.parallel.DistributedDataParallel(model)
        self.optimizer = lib.optim.AdamW(train_gpt.param_groups(model, config.weight_decay, {}),
                                         lr=config.lr, betas=(0.9, 0.95))
        self.x, self.y = x, y

    def __call__(self):
        self.optimizer.zero_grad()
        logits = self.ddp(self.x)
        loss = self.lib.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]),
                                                    self.y.view(-1), ignore_index=-1)
        loss.backward()
        self.lib.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        return loss.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each first")
    args = parser.parse_args()
    config = train_gpt.parse_args([])

    dist.init_process_group()
    comm = MPI.COMM_WORLD.Dup()
    rank, world = comm.Get_rank(), comm.Get_size()
    torch = init_torch_gloo(comm)
    use_threads(1, torch)

    chars = train_gpt.CharData(train_gpt.read_text(config), config.block_size)
    starts = chars.starts("train", config.batch_size * world, [config.seed, 0])
    x, y = chars.windows("train", starts[rank::world])
    shape = (len(chars.chars), config.block_size, config.n_layer, config.n_head, config.n_embd)
    mg.manual_seed(config.seed)
    ours = gpt(mg, *shape)
    theirs = gpt(torch, *shape)
    with torch.no_grad():
        for (_, p), (_, q) in zip(ours.state_dict().items(), theirs.state_dict().items()):
            q.copy_(torch.from_numpy(p.numpy().copy()))
    runs = {"mpigrad": DdpGptStep(mg, ours, x, y, config),
            "torch": DdpGptStep(torch, theirs, torch.from_numpy(x.numpy()),
                                torch.from_numpy(y.numpy()), config)}
    first = {lib: run() for lib, run in runs.items()}
    for run in runs.values():
        for _ in range(args.warmup - 1):
            run()
    times = {lib: [] for lib in runs}
    for round_number in range(args.rounds):
        for lib, run in list(runs.items())[::(-1) ** round_number]:
            times[lib].append(timed(comm, run, args.steps))
    torch.distributed.destroy_process_group()
    if rank == 0:
        ratios = [m / t for m, t in zip(times["mpigrad"], times["torch"])]
        ratio = statistics.median(ratios)
        params = sum(p.numel() for p in ours.parameters())
        print(f"DDP GPT (jobs/train_gpt.py's defaults: {config.n_layer} layers, {config.n_head} "
              f"heads, width {config.n_embd}, context {config.block_size}, vocabulary "
              f"{shape[0]}, {params} parameters), batch {config.batch_size} per rank, {world} "
              f"ranks, 1 thread each, float32; {args.rounds} alternating rounds of "
              f"{args.steps} steps after {args.warmup} warm-up steps, wall time")
        print("first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
        for lib in runs:
            print(f"  {lib:8s} {statistics.median(times[lib]) * 1e3:8.2f} ms/step (median of "
                  "the rounds' slowest-rank means)")
        print(f"  mpigrad / torch: {ratio:.2f}x [{min(ratios):.2f}, {max(ratios):.2f}]  "
              f"target <= {TARGET}x {'met' if ratio <= TARGET else 'MISSED'}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
