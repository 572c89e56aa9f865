"""SyncBatchNorm under DistributedDataParallel against one process with the whole batch.

N ranks with B/N samples each must normalise with the whole batch's statistics, update the
running statistics as one process would, and end with its parameters (float64, 1e-10).
Without a process group of several ranks, SyncBatchNorm is BatchNorm (torch's BatchNorm is the
oracle there).
"""
import numpy as np
import pytest

import mpigrad as mg
from mpigrad import nn
from mpigrad.nn.parallel import DistributedDataParallel as DDP
from mpigrad.optim import SGD

PER_RANK = 4
STEPS = 3


def convnet(seed):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 5 * 5, 6), nn.BatchNorm1d(6), nn.Tanh(),
                         nn.Linear(6, 2)).double()


def batches(size):
    rng = np.random.default_rng(7)
    return [(rng.normal(1.5, 2.0, (PER_RANK * size, 3, 5, 5)),
             rng.normal(size=(PER_RANK * size, 2))) for _ in range(STEPS)]


def step(model, opt, x, y):
    opt.zero_grad()
    out = model(mg.tensor(x))
    loss = ((out - mg.tensor(y)) ** 2).mean()
    loss.backward()
    opt.step()
    return out


def state(model):
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


@pytest.mark.mpi(min_size=2)
def test_ranks_train_as_one_process_with_the_whole_batch(rank, size):
    data = batches(size)
    reference = convnet(seed=0)
    reference_opt = SGD(reference.parameters(), lr=0.1, momentum=0.9)
    model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(convnet(seed=0)))
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    for x, y in data:
        whole = step(reference, reference_opt, x, y)
        part = step(model, opt, x[mine], y[mine])
        np.testing.assert_allclose(part.detach().numpy(), whole.detach().numpy()[mine],
                                   rtol=0, atol=1e-10)
    want = state(reference)
    got = state(model.module)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-10, err_msg=name)
    assert int(got["1.num_batches_tracked"]) == STEPS
    model.eval()
    reference.eval()
    x = data[0][0][mine]
    with mg.no_grad():
        np.testing.assert_allclose(model(mg.tensor(x)).numpy(), reference(mg.tensor(x)).numpy(),
                                   rtol=0, atol=1e-10)


@pytest.mark.mpi(min_size=2)
def test_uneven_batches_combine_their_statistics(rank, size):
    """Rank r holds r + 2 samples: the statistics are the concatenated batch's."""
    rng = np.random.default_rng(3)
    counts = [r + 2 for r in range(size)]
    whole = rng.normal(size=(sum(counts), 3, 2)) * 3 + 1
    start = sum(counts[:rank])
    mine = whole[start:start + counts[rank]]
    reference = nn.BatchNorm1d(3).double()
    synced = nn.SyncBatchNorm(3).double()
    expected = reference(mg.tensor(whole)).detach().numpy()[start:start + counts[rank]]
    got = synced(mg.tensor(mine)).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(synced.running_var.numpy(), reference.running_var.numpy(),
                               rtol=0, atol=1e-12)


@pytest.mark.mpi_skip  # in a world of several the statistics are synchronised
def test_without_a_group_of_several_it_is_torchs_batchnorm():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).normal(size=(6, 3, 4, 4))
    ours = nn.SyncBatchNorm(3, momentum=None).double()
    theirs = torch.nn.BatchNorm2d(3, momentum=None).double()
    for _ in range(2):
        out = ours(mg.tensor(x, requires_grad=True))
        want = theirs(torch.tensor(x))
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=0,
                               atol=1e-12)
    assert repr(ours) == repr(theirs).replace("BatchNorm2d", "SyncBatchNorm")


def test_convert_sync_batchnorm_keeps_parameters_buffers_and_mode():
    model = convnet(seed=1)
    model[1].running_mean.numpy()[:] = 0.5
    model.eval()
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert converted is model  # a container is changed in place, as torch's
    assert [type(m).__name__ for m in converted] == [
        "Conv2d", "SyncBatchNorm", "ReLU", "Flatten", "Linear", "SyncBatchNorm", "Tanh", "Linear"]
    assert not converted[1].training
    assert np.all(converted[1].running_mean.numpy() == 0.5)
    alone = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm1d(5))
    assert isinstance(alone, nn.SyncBatchNorm) and alone.num_features == 5
    with pytest.raises(ValueError, match="expected at least 2D input"):
        nn.SyncBatchNorm(5)(mg.zeros(5))
