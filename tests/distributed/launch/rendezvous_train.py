"""A 2-rank job for the rendezvous attack tests, started by torchrun: DDP trains a small model;
once training has begun rank 0 prints where the rendezvous server was, and the job trains on
until the file named by argv[1] appears (at most 60 s), then a few steps more, and prints its
loss and whether the ranks' parameters still agree."""
import pathlib
import sys
import time

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.nn as nn
import mpigrad.optim as optim
from mpigrad.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
mg.manual_seed(rank)
model = DDP(nn.Linear(4, 1))
optimizer = optim.SGD(model.parameters(), lr=0.05)
go_on = pathlib.Path(sys.argv[1])


def step():
    x = mg.randn(16, 4)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


steps = 1
step()
if rank == 0:
    request = dist.rendezvous.request_from_environment()
    print(f"training; rendezvous at {request.host} {request.port}", flush=True)
deadline = time.monotonic() + 60
while True:
    # Rank 0 decides for both, so that they take the same number of steps.
    stop = mg.tensor([float(go_on.exists() or time.monotonic() > deadline)])
    dist.broadcast(stop, 0)
    if stop.item():
        break
    step()
    steps += 1
    time.sleep(0.02)
for _ in range(3):
    loss = step()
    steps += 1
weights = mg.cat([p.detach().reshape(-1) for p in model.parameters()])
gathered = [mg.zeros_like(weights) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, weights)
agree = all(bool((g == weights).all()) for g in gathered)
print(f"rank {rank} trained {steps} steps, loss {loss:.4f}, parameters agree: {agree}",
      flush=True)
dist.destroy_process_group()
