"""The code blocks of PyTorch's tutorial "Writing Distributed Applications with PyTorch"
(intermediate/dist_tuto), with only the imports changed. The tutorial redefines `run` in each
block; here each block's `run` has the block's name. MNIST is replaced by random data of its
shape (the one line in `partition_dataset` that builds the dataset), and `Net` is the MNIST
network the tutorial trains (from its companion repository).

    mpiexec -n 2 python dist_tuto.py BLOCK[,BLOCK...] gloo|mpi    # under MPI
    python dist_tuto.py BLOCK[,BLOCK...] spawn N                   # the tutorial's own launcher

Several blocks run one after the other in one world (one launch for all of them); each line a
block prints is given to the output prefixed with the block's name, "ring: Rank 0 has ...".

The same file runs on PyTorch when the import lines marked `# torch:` are swapped in
(tests/distributed/tutorial/test_tutorial_verbatim.py does that, for the oracle).
"""
import contextlib
import functools
import io
import os
import sys
from math import ceil
from random import Random

import mpigrad as torch  # torch: import torch
import mpigrad.distributed as dist  # torch: import torch.distributed as dist
import mpigrad.nn as nn  # torch: import torch.nn as nn
import mpigrad.nn.functional as F  # torch: import torch.nn.functional as F
import mpigrad.optim as optim  # torch: import torch.optim as optim
import mpigrad.multiprocessing as mp  # torch: import torch.multiprocessing as mp


"""Blocking point-to-point communication."""


def run_blocking(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        # Send the tensor to process 1
        dist.send(tensor=tensor, dst=1)
    else:
        # Receive tensor from process 0
        dist.recv(tensor=tensor, src=0)
    print('Rank ', rank, ' has data ', tensor[0])


"""Non-blocking point-to-point communication."""


def run_nonblocking(rank, size):
    tensor = torch.zeros(1)
    req = None
    if rank == 0:
        tensor += 1
        # Send the tensor to process 1
        req = dist.isend(tensor=tensor, dst=1)
        print('Rank 0 started sending')
    else:
        # Receive tensor from process 0
        req = dist.irecv(tensor=tensor, src=0)
        print('Rank 1 started receiving')
    req.wait()
    print('Rank ', rank, ' has data ', tensor[0])


""" All-Reduce example."""


def run_all_reduce(rank, size):
    """ Simple collective communication. """
    group = dist.new_group([0, 1])
    tensor = torch.ones(1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print('Rank ', rank, ' has data ', tensor[0])


""" Dataset partitioning helper """


class Partition(object):

    def __init__(self, data, index):
        self.data = data
        self.index = index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, index):
        data_idx = self.index[index]
        return self.data[data_idx]


class DataPartitioner(object):

    def __init__(self, data, sizes=[0.7, 0.2, 0.1], seed=1234):
        self.data = data
        self.partitions = []
        rng = Random()
        rng.seed(seed)
        data_len = len(data)
        indexes = [x for x in range(0, data_len)]
        rng.shuffle(indexes)

        for frac in sizes:
            part_len = int(frac * data_len)
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x)


""" Partitioning MNIST """


def partition_dataset():
    generator = torch.Generator().manual_seed(0)  # MNIST-shaped random data, not MNIST
    dataset = torch.utils.data.TensorDataset(
        torch.randn(256, 1, 28, 28, generator=generator),
        torch.randint(0, 10, (256,), generator=generator))
    size = dist.get_world_size()
    bsz = 128 // size
    partition_sizes = [1.0 / size for _ in range(size)]
    partition = DataPartitioner(dataset, partition_sizes)
    partition = partition.use(dist.get_rank())
    train_set = torch.utils.data.DataLoader(partition,
                                            batch_size=bsz,
                                            shuffle=True)
    return train_set, bsz


""" Gradient averaging. """


def average_gradients(model):
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


""" Distributed Synchronous SGD Example """


def run_training(rank, size):
    torch.manual_seed(1234)
    train_set, bsz = partition_dataset()
    model = Net()
    optimizer = optim.SGD(model.parameters(),
                          lr=0.01, momentum=0.5)

    num_batches = ceil(len(train_set.dataset) / float(bsz))
    for epoch in range(3):
        epoch_loss = 0.0
        for data, target in train_set:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            epoch_loss += loss.item()
            loss.backward()
            average_gradients(model)
            optimizer.step()
        print('Rank ', dist.get_rank(), ', epoch ',
              epoch, ': ', epoch_loss / num_batches)
    return model


""" Implementation of a ring-reduce with addition. """


def allreduce(send, recv):
    rank = dist.get_rank()
    size = dist.get_world_size()
    send_buff = send.clone()
    recv_buff = send.clone()
    accum = send.clone()

    left = ((rank - 1) + size) % size
    right = (rank + 1) % size

    for i in range(size - 1):
        if i % 2 == 0:
            # Send send_buff
            send_req = dist.isend(send_buff, right)
            dist.recv(recv_buff, left)
            accum[:] += recv_buff[:]
        else:
            # Send recv_buff
            send_req = dist.isend(recv_buff, right)
            dist.recv(send_buff, left)
            accum[:] += send_buff[:]
        send_req.wait()
    recv[:] = accum[:]


def run_ring(rank, size):
    send = torch.arange(4.0) + 10 * rank
    recv = torch.zeros(4)
    allreduce(send, recv)
    print('Rank ', rank, ' has data ', recv)


""" Initialize the distributed environment. """


def init_process(rank, size, fn, backend='gloo'):
    """ Initialize the distributed environment. """
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = os.environ.get('TUTORIAL_PORT', '29500')
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


def run_blocks(names, rank, size):
    """Each named block in turn, its printed lines prefixed with its name (the blocks are the
    tutorial's own; only this harness around them is not)."""
    for name in names:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            globals()["run_" + name](rank, size)
        for line in printed.getvalue().splitlines():
            print(f"{name}: {line}")


if __name__ == "__main__":
    blocks, launch = functools.partial(run_blocks, sys.argv[1].split(",")), sys.argv[2]
    if launch == "mpi":
        # The tutorial's MPI preamble. MPI assigns the ranks, so the placeholder (0, 0) it
        # passes on is replaced by the group's own.
        init_process(0, 0, lambda rank, size: blocks(dist.get_rank(), dist.get_world_size()),
                     backend='mpi')
    elif launch == "gloo":
        # Under mpiexec each process learns its place from the launcher.
        init_process(int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"]), blocks)
    else:
        world_size = int(sys.argv[3])
        processes = []
        mp.set_start_method("spawn")
        for rank in range(world_size):
            p = mp.Process(target=init_process, args=(rank, world_size, blocks))
            p.start()
            processes.append(p)

        for p in processes:
            p.join()
