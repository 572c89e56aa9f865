"""jobs/train.py's ResNet equals the same network in torch (float64): loss (plain and with
label smoothing), every parameter gradient, and the BatchNorm running statistics and weights
after one SGD step."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import mpigrad
from mpigrad import nn, optim

torch = pytest.importorskip("torch")

TRAIN = Path(__file__).resolve().parents[2] / "jobs" / "train.py"


def _load_train_module(monkeypatch):
    # train.py imports its sibling jobs/common.py as a top-level module, as when run as a script.
    monkeypatch.syspath_prepend(str(TRAIN.parent))
    spec = importlib.util.spec_from_file_location("jobs_train", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TorchBasicBlock(torch.nn.Module):
    def __init__(self, in_channels, channels, stride=1):
        super().__init__()
        tnn = torch.nn
        self.conv1 = tnn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = tnn.BatchNorm2d(channels)
        self.relu = tnn.ReLU()
        self.conv2 = tnn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = tnn.BatchNorm2d(channels)
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = tnn.Sequential(
                tnn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                tnn.BatchNorm2d(channels))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


def _torch_resnet(in_channels, num_classes):
    tnn = torch.nn
    return tnn.Sequential(
        tnn.Conv2d(in_channels, 16, 3, padding=1, bias=False), tnn.BatchNorm2d(16), tnn.ReLU(),
        TorchBasicBlock(16, 16), TorchBasicBlock(16, 32, stride=2),
        tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(32, num_classes))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_resnet_step_matches_torch(monkeypatch, label_smoothing):
    ours = _load_train_module(monkeypatch).resnet(3, 5).double()
    theirs = _torch_resnet(3, 5).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: mpigrad.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3, 8, 8)), rng.integers(0, 5, 4)
    loss_ours = nn.CrossEntropyLoss(label_smoothing=label_smoothing)(ours(mpigrad.tensor(x)),
                                                                     mpigrad.tensor(y))
    loss_theirs = torch.nn.CrossEntropyLoss(label_smoothing=label_smoothing)(
        theirs(torch.tensor(x)), torch.tensor(y))
    np.testing.assert_allclose(loss_ours.item(), loss_theirs.item(), rtol=1e-10)
    loss_ours.backward()
    loss_theirs.backward()
    for (name, po), (_, pt) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(po.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-10,
                                   err_msg=name)
    optim.SGD(ours.parameters(), lr=0.1, momentum=0.9).step()
    torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9).step()
    theirs_state = theirs.state_dict()
    for name, value in ours.state_dict().items():
        np.testing.assert_allclose(value.numpy(), theirs_state[name].numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=name)


def test_resnet_gradients_are_the_same_bits_on_one_and_two_threads(monkeypatch):
    """float32, big enough that the convolutions cut several chunks for the pool's threads and
    BatchNorm's loops run threaded: the gradients may not depend on the thread count. Held
    for mpigrad's own kernels: oneDNN's convolutions, like torch's, give the same bits from
    run to run on one thread count only (docs/threads.md)."""
    monkeypatch.setattr(mpigrad.backends.mkldnn, "enabled", False)
    model = _load_train_module(monkeypatch).resnet(3, 5).float()
    rng = np.random.default_rng(1)
    x = mpigrad.tensor(rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    y = mpigrad.tensor(rng.integers(0, 5, 16))

    def gradients(threads):
        mpigrad.set_num_threads(threads)
        model.zero_grad()
        nn.CrossEntropyLoss()(model(x), y).backward()
        return [p.grad.numpy().copy() for p in model.parameters()]
    before = mpigrad.get_num_threads()
    try:
        one, two = gradients(1), gradients(2)
    finally:
        mpigrad.set_num_threads(before)
    for (name, _), a, b in zip(model.named_parameters(), one, two):
        np.testing.assert_array_equal(a, b, err_msg=name)
