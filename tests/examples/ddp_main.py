# pytorch/examples distributed/ddp/main.py (demo_basic and demo_checkpoint), with the imports
# changed (lines marked `# torch:` hold the original) and, because neither library has a GPU
# here, the GPU placement written for the CPU as PyTorch's DDP tutorial says to: the model and
# labels stay where they are (`.to(rank)` dropped), DDP gets `device_ids=None`, and the
# checkpoint is loaded with map_location="cpu". Each such line is marked `# cpu:` with the
# original. demo_basic is also the DDP tutorial's ("Getting Started with Distributed Data
# Parallel"), so this one file serves both launches:
#
#     mpiexec -n N python ddp_main.py      # or torchrun: the processes come from the launcher
#     python ddp_main.py N                 # the tutorial's: mp.spawn(demo_basic, nprocs=N)
#
# Each process prints its parameters' checksum after each demo (not in the originals): equal
# on every rank only if the ranks formed one world. demo_model_parallel needs two GPUs per
# process and is left out.
import os
import sys
import tempfile
import mpigrad as torch  # torch: import torch
import mpigrad.distributed as dist  # torch: import torch.distributed as dist
import mpigrad.nn as nn  # torch: import torch.nn as nn
import mpigrad.optim as optim  # torch: import torch.optim as optim
import mpigrad.multiprocessing as mp  # torch: import torch.multiprocessing as mp

from mpigrad.nn.parallel import DistributedDataParallel as DDP  # torch: from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("EXAMPLE_PORT", "12355")

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

    cleanup()
    return ddp_model


def demo_checkpoint(rank, world_size):
    print(f"Running DDP checkpoint example on rank {rank}.")
    setup(rank, world_size)

    model = ToyModel()  # cpu: model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=None)  # cpu: ddp_model = DDP(model, device_ids=[rank])

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    CHECKPOINT_PATH = tempfile.gettempdir() + "/model.checkpoint"
    if rank == 0:
        # All processes should see same parameters as they all start from same
        # random parameters and gradients are synchronized in backward passes.
        # Therefore, saving it in one process is sufficient.
        torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)

    # Use a barrier() to make sure that process 1 loads the model after process
    # 0 saves it.
    dist.barrier()
    # configure map_location properly
    map_location = "cpu"  # cpu: map_location = {"cuda:%d" % 0: "cuda:%d" % rank}
    ddp_model.load_state_dict(torch.load(CHECKPOINT_PATH, map_location=map_location))

    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)  # cpu: labels = torch.randn(20, 5).to(rank)
    loss_fn = nn.MSELoss()
    loss_fn(outputs, labels).backward()
    optimizer.step()

    # Use a barrier() to make sure that all processes have finished reading the
    # checkpoint
    dist.barrier()

    if rank == 0:
        os.remove(CHECKPOINT_PATH)

    cleanup()
    return ddp_model


def print_checksum(rank, demo, model):
    weights = [p.detach().numpy().copy() for p in model.parameters()]
    print(f"rank {rank} {demo.__name__} checksum {sum(float(w.sum()) for w in weights):.10f}",
          flush=True)


def spawned_demo_basic(rank, world_size):
    print_checksum(rank, demo_basic, demo_basic(rank, world_size))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        world_size = int(sys.argv[1])
        mp.spawn(spawned_demo_basic, args=(world_size,), nprocs=world_size, join=True)
    else:
        # The launcher's place for this process: mpiexec's, or torchrun's.
        rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", 0)))
        world_size = int(os.environ.get("PMI_SIZE", os.environ.get("WORLD_SIZE", 1)))
        for demo in (demo_basic, demo_checkpoint):
            print_checksum(rank, demo, demo(rank, world_size))
