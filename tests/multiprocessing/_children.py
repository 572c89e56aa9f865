"""What the children of tests/multiprocessing/test_multiprocessing.py run. A spawned child
imports the module of its function: this one imports no pytest (0.13 s of CPU a child) and
no MPI (a child that joins a world imports mpigrad.distributed itself, so that the test
session's process stays free of MPI)."""
import os
import pathlib
import signal
import socket
import sys
import time

import mpigrad.multiprocessing as mp


def write_index(index, folder, text):
    pathlib.Path(folder, f"{index}.txt").write_text(f"{text} {index} {os.getpid()}")


def raise_in_one(index, failing):
    if index == failing:
        raise ValueError(f"child {index} fails on purpose")
    time.sleep(300)  # ended by the parent


def kill_self(index):
    if index == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(300)


def exit_with(index, code):
    if index == 1:
        sys.exit(code)
    time.sleep(300)


def sleep(index, seconds):
    time.sleep(seconds)


def write_secret(index, folder):
    write_index(index, folder, os.environ["MPIGRAD_RENDEZVOUS_SECRET"])


def fail_in_several_ways(index, ways):
    way = ways[index]
    if way == "exit":
        sys.exit(1)
    if way == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if way == "raise":
        raise ValueError(f"child {index} is the cause")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def in_one_world(index, size, port, how):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import mpigrad.distributed as dist  # in the child only: the parent stays free of MPI
    dist.init_process_group("gloo", rank=index, world_size=size)
    if index == size - 1:
        if how == "raise":
            raise ValueError(f"rank {index} of {dist.get_world_size()} fails on purpose")
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()  # where the other ranks wait for the failing one


def join_in_the_parents_world(index, folder):
    import mpigrad as mg  # in the child only: the parent stays free of MPI
    import mpigrad.distributed as dist
    dist.init_process_group("gloo", rank=index, world_size=int(os.environ["WORLD_SIZE"]))
    total = mg.tensor([float(index + 1)])
    dist.all_reduce(total)
    write_index(index, folder, f"{dist.get_world_size()} {total.item():g}")
    dist.destroy_process_group()


def one_world_then_linger(index, size, port, folder):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import mpigrad as mg  # in the child only: the parent stays free of MPI
    import mpigrad.distributed as dist
    dist.init_process_group("gloo", rank=index, world_size=size)
    total = mg.tensor([float(index + 1)])
    dist.all_reduce(total)
    dist.destroy_process_group()
    if index == 0:
        # On while the others are in MPI_Finalize: they write their file just before they
        # return (and finalize at exit), so wait for those, then give them a moment to get there.
        others = [pathlib.Path(folder, f"{i}.txt") for i in range(1, size)]
        deadline = time.monotonic() + 60
        while not all(path.exists() for path in others) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    write_index(index, folder, f"{dist.get_world_size() if dist.is_initialized() else size} "
                                f"{total.item():g}")


def lingering_world(start_method, folder):
    mp.start_processes(one_world_then_linger, args=(3, free_port(), folder), nprocs=3,
                       start_method=start_method)


def rpc_world(index, size, port, folder):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    import mpigrad as mg  # in the child only: the parent stays free of MPI
    import mpigrad.distributed.rpc as rpc
    rpc.init_rpc(f"worker{index}", rank=index, world_size=size)
    peer = rpc.get_worker_info(f"worker{(index + 1) % size}")
    answer = rpc.rpc_sync(peer.name, mg.add, args=(mg.ones(2), float(index)))
    write_index(index, folder, f"{peer.id} {answer[0].item():g}")
    rpc.shutdown()
