"""The "Initialization Methods" of PyTorch's tutorial "Writing Distributed Applications with
PyTorch" (intermediate/dist_tuto): shared file system (file://) and TCP (tcp://), each process
started on its own with its rank, then one all_reduce. The imports are changed (lines marked
`# torch:` hold the original); the tutorial's file:// call gains the rank that torch requires
for it (torch raises "rank parameter missing" without it).

    python init_methods.py tcp://127.0.0.1:PORT|file:///PATH RANK WORLD_SIZE
"""
import sys

import mpigrad as torch  # torch: import torch
import mpigrad.distributed as dist  # torch: import torch.distributed as dist

url, rank, world_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
backend = 'gloo'
if url.startswith("tcp://"):
    # Use address of one of the machines
    dist.init_process_group(backend, init_method=url,
                            rank=rank, world_size=world_size)
else:
    dist.init_process_group(
        init_method=url,
        rank=rank,
        world_size=world_size,
        group_name='mygroup')
tensor = torch.ones(1) * (rank + 1)
dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
print('Rank ', dist.get_rank(), ' of ', dist.get_world_size(), ' has data ', tensor[0])
dist.destroy_process_group()
