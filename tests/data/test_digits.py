import sys

import numpy as np
import pytest

from mpigrad.data import load_digits


def test_train_and_test_split_the_1797_images_disjointly():
    pytest.importorskip("sklearn")
    train, test = load_digits(seed=2), load_digits(train=False, seed=2)
    assert (len(train), len(test)) == (1438, 359)
    images, labels = train.tensors
    assert images.shape == (1438, 1, 8, 8) and images.dtype == np.float32
    assert labels.dtype == np.int64 and set(np.unique(labels.detach().numpy())) == set(range(10))
    assert 0 <= images.detach().numpy().min() and images.detach().numpy().max() == 1
    train_rows = {row.tobytes() for row in images.detach().numpy()}
    test_rows = {row.tobytes() for row in test.tensors[0].detach().numpy()}
    assert len(train_rows) == 1438 and not train_rows & test_rows
    np.testing.assert_array_equal(load_digits(seed=2).tensors[1].detach().numpy(), labels.detach().numpy())


def test_missing_scikit_learn_is_named_with_the_install_command(monkeypatch):
    # A None entry in sys.modules makes importing that module fail as if it were absent.
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ModuleNotFoundError, match="pip install scikit-learn"):
        load_digits()


def test_test_fraction_must_be_a_proper_fraction():
    with pytest.raises(ValueError, match="between 0 and 1"):
        load_digits(test_fraction=1.0)
