"""Per-rank memory of a sharded GPT's training step, measured with tracemalloc (numpy reports
its arrays to it): the peak over a step, and the parameters + gradients + optimizer state
that stay. `python -m tests.distributed.fsdp._memory` under mpiexec prints the docs table's
row for its world size (docs/fsdp.md)."""
import gc
import tracemalloc

import numpy as np

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad.distributed.fsdp import fully_shard

from ._gpt import GPT

LAYERS, WIDTH = 8, 48   # eight equal blocks, a small root (vocabulary 13, 4 positions)


def measure(sharded=True):
    """(peak bytes over a step, bytes of shards + gradients + optimizer state, bytes of the
    largest unit's full parameters, bytes of the whole model's parameters, the number of
    parameter tensors)."""
    tracemalloc.start()
    mg.manual_seed(0)
    model = GPT(13, 4, LAYERS, 2, WIDTH, 0.0).double()
    total = sum(p._array.nbytes for p in model.parameters())
    tensors = len(list(model.parameters()))
    unit = sum(p._array.nbytes for p in model.h[0].parameters())
    if sharded:
        for block in model.h:
            fully_shard(block)
        fully_shard(model)
    opt = mg.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(dist.get_rank() if dist.is_initialized() else 0)
    idx = mg.tensor(rng.integers(0, 13, (1, 4)))

    def step():
        opt.zero_grad()
        _, loss = model(idx, idx)
        loss.backward()
        opt.step()

    step()
    gc.collect()
    tracemalloc.reset_peak()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    kept = sum(p._array.nbytes + p.grad._array.nbytes for p in model.parameters())
    kept += sum(v._array.nbytes for s in opt.state.values() for v in s.values()
                if isinstance(v, mg.Tensor))
    return peak, kept, unit, total, tensors


if __name__ == "__main__":
    dist.init_process_group()
    peak, kept, unit, total, _ = measure()
    peaks = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, (peak, kept))
    if dist.get_rank() == 0:
        worst = max(p for p, _ in peaks)
        mb = 1 / 2 ** 20
        print(f"| {dist.get_world_size()} | {total * mb:.2f} | {max(k for _, k in peaks) * mb:.2f}"
              f" | {worst * mb:.2f} | {unit * mb:.2f} |")
