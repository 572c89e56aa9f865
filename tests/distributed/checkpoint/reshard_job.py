"""A job for test_dcp's resharding test, run under its own mpiexec (or as one process):

    python reshard_job.py save DIR   # train 3 AdamW steps, save the state sharded
    python reshard_job.py load DIR   # load it sharded for this world size and whole; check
                                     # both against the one-process oracle and step on

Exits non-zero (the job aborts) if anything differs."""
import sys

import numpy as np

import mpigrad as mg
import mpigrad.distributed as dist
import mpigrad.distributed.checkpoint as dcp
from tests.distributed.checkpoint._states import model, sharded_state, train_step, trained

SAVED_STEPS = 3


def save(directory):
    net, optimizer = trained(SAVED_STEPS)
    dcp.save(sharded_state(net, optimizer, dist.get_rank(), dist.get_world_size()),
             checkpoint_id=directory)


def load(directory):
    rank, size = dist.get_rank(), dist.get_world_size()
    reference, reference_optimizer = trained(SAVED_STEPS)

    # Sharded at this world size: each rank's slices are the oracle's.
    net, optimizer = trained(1)  # a state of the right layout, every value different
    target = sharded_state(net, optimizer, rank, size)
    dcp.load(target, checkpoint_id=directory)
    expected = sharded_state(reference, reference_optimizer, rank, size)
    check_equal(target, expected)

    # Whole, into a fresh model and optimizer: the next step equals the oracle's.
    net = model(seed=1)
    optimizer = mg.optim.AdamW(net.parameters(), lr=1.0)
    state = {"model": net.state_dict(), "optim": optimizer.state_dict()}
    dcp.load(state, checkpoint_id=directory)
    optimizer.load_state_dict(state["optim"])
    train_step(net, optimizer, SAVED_STEPS)
    train_step(reference, reference_optimizer, SAVED_STEPS)
    check_equal({"model": net.state_dict(), "optim": optimizer.state_dict()},
                {"model": reference.state_dict(), "optim": reference_optimizer.state_dict()})
    print(f"rank {rank} of {size}: loaded and stepped as one process", flush=True)


def check_equal(actual, expected, where="state"):
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), (where, actual.keys(), expected.keys())
        for key in expected:
            check_equal(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, dcp.FlatShard):
        assert (actual.offset, actual.global_shape) == (expected.offset, expected.global_shape)
        np.testing.assert_array_equal(actual.local._array[:actual.length],
                                      expected.local._array[:expected.length], err_msg=where)
    elif isinstance(expected, mg.Tensor):
        np.testing.assert_array_equal(actual._array, expected._array, err_msg=where)
    else:
        assert actual == expected, (where, actual, expected)


if __name__ == "__main__":
    dist.init_process_group()
    {"save": save, "load": load}[sys.argv[1]](sys.argv[2])
    dist.destroy_process_group()
