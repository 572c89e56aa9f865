"""PyTorch's tutorial "Getting Started with Distributed Data Parallel" (intermediate/ddp_tutorial):
its basic use case, launched as the tutorial launches it (`mp.spawn(demo_basic,
args=(world_size,), nprocs=world_size, join=True)`), with the imports changed (lines marked
`# torch:` hold the original) and the GPU placement written for the CPU as the tutorial says
for CPU training (lines marked `# cpu:` hold the original). One line is added (`# added:`): each
rank prints a checksum of its parameters after the step, which are equal on every rank only if
the ranks formed one world.

    python ddp_tutorial.py N       # N processes; DDP_TUTORIAL_PORT sets MASTER_PORT
"""
import os
import sys
import mpigrad as torch  # torch: import torch
import mpigrad.distributed as dist  # torch: import torch.distributed as dist
import mpigrad.nn as nn  # torch: import torch.nn as nn
import mpigrad.optim as optim  # torch: import torch.optim as optim
import mpigrad.multiprocessing as mp  # torch: import torch.multiprocessing as mp

from mpigrad.nn.parallel import DistributedDataParallel as DDP  # torch: from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = os.environ.get('DDP_TUTORIAL_PORT', '12355')

    # initialize the process group
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size):
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size)

    # create model and move it to GPU with id rank
    model = ToyModel()  # cpu: model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=None)  # cpu: ddp_model = DDP(model, device_ids=[rank])

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)  # cpu: labels = torch.randn(20, 5).to(rank)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    print(f"rank {rank} checksum {sum(float(p.detach().sum()) for p in model.parameters()):.10f}", flush=True)  # added:

    cleanup()
    print(f"Finished running basic DDP example on rank {rank}.")


def run_demo(demo_fn, world_size):
    mp.spawn(demo_fn,
             args=(world_size,),
             nprocs=world_size,
             join=True)


if __name__ == "__main__":
    world_size = int(sys.argv[1])  # cpu: n_gpus = torch.accelerator.device_count(); world_size = n_gpus
    run_demo(demo_basic, world_size)
