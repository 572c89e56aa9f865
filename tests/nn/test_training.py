"""An MLP trained with a hand-written SGD loop learns a small separable problem."""
import numpy as np

import mpigrad as mg
from mpigrad import nn


def test_mlp_reaches_full_train_accuracy_on_separable_blobs():
    rng = np.random.default_rng(0)
    centers = np.array([[2.0, 2.0], [-2.0, 2.0], [0.0, -2.5]])
    labels = rng.integers(0, 3, 150)
    x = mg.tensor(centers[labels] + 0.5 * rng.standard_normal((150, 2)))
    y = mg.tensor(labels)
    model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
    loss_fn = nn.CrossEntropyLoss()
    first = None
    for _ in range(60):
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        with mg.no_grad():
            for p in model.parameters():
                p.sub_(p.grad * 0.5)
        first = loss.item() if first is None else first
    model.eval()
    accuracy = (model(x).argmax(1).detach().numpy() == labels).mean()
    assert accuracy == 1.0
    assert loss.item() < first / 5
