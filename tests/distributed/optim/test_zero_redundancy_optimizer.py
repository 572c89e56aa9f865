"""ZeroRedundancyOptimizer against the plain optimizer in one process (float64, 1e-10), its
partition against PyTorch's own code, and state dicts moved between world sizes.

The oracle for training: N ranks, each with its slice of a global batch, DDP averaging the
gradients and ZeRO stepping the shards, must end with the parameters one process gets from
the whole batch with the plain optimizer.
"""
import numpy as np
import pytest
from mpi4py import MPI

import mpigrad as mg
import mpigrad.distributed as dist
from mpigrad import nn
from mpigrad.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import reduce_to_owner_hook
from mpigrad.distributed.optim import ZeroRedundancyOptimizer
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD, Adam

PER_RANK = 3
STEPS = 4
OPTIMIZERS = {"sgd": (SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
              "adam": (Adam, dict(lr=0.01, betas=(0.8, 0.95)))}


def model(seed=0):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 11), nn.Tanh(), nn.Linear(11, 9), nn.Tanh(),
                         nn.Linear(9, 4)).double()


def batches(size):
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((PER_RANK * size, 6)), rng.standard_normal((PER_RANK * size, 4)))
            for _ in range(STEPS)]


def param_groups(net):
    """Two groups (the second with its own lr), so the partition spans groups."""
    params = list(net.parameters())
    return [{"params": params[:3]}, {"params": params[3:], "lr": 0.02}]


def train(net, opt, data, lo, hi):
    for x, y in data:
        opt.zero_grad()
        loss = ((net(mg.tensor(x[lo:hi])) - mg.tensor(y[lo:hi])) ** 2).mean()
        loss.backward()
        opt.step()


def plain_run(name, size, steps=STEPS):
    cls, kwargs = OPTIMIZERS[name]
    net = model()
    opt = cls(param_groups(net), **kwargs)
    train(net, opt, batches(size)[:steps], 0, PER_RANK * size)
    return net, opt


def zero_run(name, rank, size, steps=STEPS, as_view=False, stage=1):
    cls, kwargs = OPTIMIZERS[name]
    net = model()
    ddp = DDP(net, bucket_cap_mb=300 / 2**20)  # several buckets, one reduced in place
    opt = ZeroRedundancyOptimizer(param_groups(net), cls, parameters_as_bucket_view=as_view,
                                  **kwargs)
    if stage == 2:
        ddp.register_comm_hook(opt, reduce_to_owner_hook)
    train(ddp, opt, batches(size)[:steps], rank * PER_RANK, (rank + 1) * PER_RANK)
    return net, opt


def state_bytes(optimizer):
    return sum(v._array.nbytes for values in optimizer.state.values() for v in values.values()
               if isinstance(v, mg.Tensor))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("stage", [1, 2], ids=["ZeRO-1", "ZeRO-2"])
@pytest.mark.parametrize("as_view", [False, True], ids=["per-parameter", "bucket-view"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_same_parameters_as_the_plain_optimizer(rank, size, name, as_view, stage):
    net, opt = zero_run(name, rank, size, as_view=as_view, stage=stage)
    want, plain = plain_run(name, size)
    for got, expected in zip(net.parameters(), want.parameters()):
        np.testing.assert_allclose(got._array, expected._array, rtol=0, atol=1e-10)
    flat = np.concatenate([p._array.ravel() for p in net.parameters()])
    everyone = MPI.COMM_WORLD.allgather(flat)
    assert all(np.array_equal(other, flat) for other in everyone)
    # Each rank keeps state only for what it owns; together that is the whole state, once.
    owned = {id(p) for p in opt.optim.state}
    assert owned == {id(p) for g in opt._partition_parameters()[rank] for p in g["params"]}
    totals = MPI.COMM_WORLD.allgather(state_bytes(opt.optim))
    assert sum(totals) == state_bytes(plain)
    # ZeRO-2: between steps a rank holds only its own parameters' gradients.
    held = [p for p in net.parameters() if p.grad is not None]
    if stage == 2:
        assert {id(p) for p in held} == owned
    else:
        assert len(held) == len(list(net.parameters()))


@pytest.mark.mpi(min_size=2)
def test_learning_rate_changes_reach_the_local_optimizer(rank, size):
    net = model()
    opt = ZeroRedundancyOptimizer(net.parameters(), SGD, lr=0.1)
    for group in opt.param_groups:
        group["lr"] = 0.0
    before = [p._array.copy() for p in net.parameters()]
    for p in net.parameters():
        p.grad = mg.tensor(np.ones(p.shape))
    opt.step()
    assert all(np.array_equal(a, p._array) for a, p in zip(before, net.parameters()))
    assert all(g["lr"] == 0.0 for g in opt.optim.param_groups)


def torch_partition(sizes_per_group, world_size):
    """PyTorch's own `_partition_parameters`, run on tensors of the given sizes without a
    process group: only `world_size`, the groups and the cache are read."""
    torch = pytest.importorskip("torch")
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZeRO
    groups = [{"params": [torch.empty(n) for n in sizes]} for sizes in sizes_per_group]
    zero = object.__new__(TorchZeRO)
    zero.world_size, zero.param_groups, zero._partition_parameters_cache = world_size, groups, []
    index = {id(p): (g, i) for g, group in enumerate(groups) for i, p in enumerate(group["params"])}
    return [[[index[id(p)] for p in group["params"]] for group in rank_groups]
            for rank_groups in zero._partition_parameters()]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("sizes_per_group", [
    [[802816, 1024, 1048576, 1024, 1048576, 1024, 10240, 10]],   # the 784-1024-1024-1024-10 MLP
    [[5, 5, 5, 3, 3, 7], [100, 1, 1, 1, 40]],                   # ties, and totals across groups
    [[1], [2]],                                                  # fewer parameters than ranks
], ids=["mlp", "ties-and-groups", "tiny"])
def test_partition_is_pytorchs(size, sizes_per_group):
    params = [[mg.tensor(np.zeros(n)) for n in sizes] for sizes in sizes_per_group]
    opt = ZeroRedundancyOptimizer([{"params": ps} for ps in params], SGD, lr=0.1)
    index = {id(p): (g, i) for g, ps in enumerate(params) for i, p in enumerate(ps)}
    mine = [[[index[id(p)] for p in group["params"]] for group in rank_groups]
            for rank_groups in opt._partition_parameters()]
    assert mine == torch_partition(sizes_per_group, size)
    for r, rank_groups in enumerate(opt._partition_parameters()):
        assert all(opt.owner_of(p) == r for g in rank_groups for p in g["params"])


def consolidated(opt, to):
    """Rank `to`'s state dict, handed to every rank (pickled: a test of a few kB)."""
    opt.consolidate_state_dict(to=to)
    state_dict = opt.state_dict() if dist.get_rank() == to else None
    if dist.get_rank() != to:
        with pytest.raises(RuntimeError, match="consolidate_state_dict"):
            opt.state_dict()
    return MPI.COMM_WORLD.bcast(state_dict, root=to)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_state_dict_is_the_plain_optimizers(rank, size, name):
    """Consolidated on the last rank, the state dict is what the plain optimizer would save."""
    _, opt = zero_run(name, rank, size)
    _, plain = plain_run(name, size)
    assert_same_state_dict(consolidated(opt, size - 1), plain.state_dict())


def assert_same_state_dict(got, want):
    assert [{k: v for k, v in g.items()} for g in got["param_groups"]] == want["param_groups"]
    assert sorted(got["state"]) == sorted(want["state"])
    for i, values in want["state"].items():
        assert got["state"][i].keys() == values.keys()
        for key, value in values.items():
            if isinstance(value, mg.Tensor):
                np.testing.assert_allclose(got["state"][i][key]._array, value._array, rtol=0,
                                           atol=1e-10)
            else:
                assert got["state"][i][key] == value


def run_on_first(k, name, data, resume=None):
    """ZeRO on a group of global ranks 0..k-1 over `data`, every member taking the whole
    batch (so all hold the same gradients and no DDP is needed), from `resume` = (weights,
    state dict) if given. Returns rank 0's (weights, consolidated state dict) on every rank."""
    group = dist.new_group(list(range(k)))
    result = None
    if group is not dist.GroupMember.NON_GROUP_MEMBER:
        cls, kwargs = OPTIMIZERS[name]
        net = model()
        opt = ZeroRedundancyOptimizer(param_groups(net), cls, process_group=group, **kwargs)
        if resume is not None:
            for p, w in zip(net.parameters(), resume[0]):
                p._array[...] = w
            opt.load_state_dict(resume[1])
        train(net, opt, data, 0, len(data[0][0]))
        opt.consolidate_state_dict(to=0)
        if group.rank() == 0:
            result = ([p._array.copy() for p in net.parameters()], opt.state_dict())
        dist.destroy_process_group(group)
    return MPI.COMM_WORLD.bcast(result, root=0)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_state_dict_moves_between_world_sizes(size, name):
    """Half the steps on N-1 ranks, saved, the rest on N ranks after loading (and N to N-1):
    the result equals an uninterrupted plain run, and so does the saved state dict."""
    data = batches(size)
    half = STEPS // 2
    want, plain = plain_run(name, size)
    for first, second in ((size - 1, size), (size, size - 1)):
        weights, state_dict = run_on_first(second, name, data[half:],
                                           resume=run_on_first(first, name, data[:half]))
        for got, expected in zip(weights, want.parameters()):
            np.testing.assert_allclose(got, expected._array, rtol=0, atol=1e-10)
        assert_same_state_dict(state_dict, plain.state_dict())


@pytest.mark.mpi(min_size=2)
def test_optimizer_state_is_sharded(rank, size):
    """Adam's state per rank on the MNIST-shaped MLP: measured, and the shards add up to the
    whole. (Per-parameter ownership bounds the balance: the largest parameter is 36% of the
    model, so at 3 ranks one rank holds at least that share.)"""
    mg.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                        nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = ZeroRedundancyOptimizer(net.parameters(), Adam, lr=1e-3)
    for p in net.parameters():
        p.grad = mg.zeros(p.shape)
    opt.step()
    per_rank = MPI.COMM_WORLD.allgather(state_bytes(opt.optim))
    unsharded = 2 * sum(p._array.nbytes for p in net.parameters())
    assert sum(per_rank) == unsharded
    largest = max(p._array.nbytes for p in net.parameters())
    # The greedy rule's guarantee: no rank exceeds the ideal share by more than one parameter.
    assert max(per_rank) <= unsharded / size + 2 * largest


def test_bad_arguments_are_named(process_group):
    net = model()
    with pytest.raises(ValueError, match="overlap_with_ddp"):
        ZeroRedundancyOptimizer(net.parameters(), SGD, overlap_with_ddp=True, lr=0.1)
    with pytest.raises(TypeError, match="optimizer_class"):
        ZeroRedundancyOptimizer(net.parameters(), "SGD", lr=0.1)
    opt = ZeroRedundancyOptimizer(net.parameters(), SGD, lr=0.1)
    with pytest.raises(ValueError, match="to must be a rank"):
        opt.consolidate_state_dict(to=dist.get_world_size())
    with pytest.raises(RuntimeError, match="consolidate_state_dict"):
        opt.state_dict()
    with pytest.raises(ValueError, match="parameter groups of sizes"):
        opt.load_state_dict({"state": {}, "param_groups": []})
