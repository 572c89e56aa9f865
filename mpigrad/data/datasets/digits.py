"""scikit-learn's bundled 8x8 handwritten digits, when scikit-learn is installed."""
import numpy as np

from ...creation import from_numpy

from .._checks import check_int
from ..dataset import TensorDataset


def load_digits(train=True, test_fraction=0.2, seed=0):
    """The 1,797 8x8 digit images that ship with scikit-learn, split into train and test.

    The split is a permutation by `seed`: the first `test_fraction` of it is
    the test set (`train=False`), the rest the training set, so the two are
    disjoint for the same seed. Samples are `(image, label)`: a float32 image
    of shape `(1, 8, 8)` with values in [0, 1], and an int64 label.

    Needs scikit-learn (`pip install scikit-learn`); nothing is downloaded.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction should be between 0 and 1, got {test_fraction!r}")
    seed = check_int("seed", seed, 0)
    try:
        # Not at the top: scikit-learn is an optional dependency, needed only here.
        from sklearn.datasets import load_digits as sklearn_load_digits
    except ModuleNotFoundError as e:
        # Only a missing scikit-learn is the user's to fix by installing it; a module
        # missing inside an installed one is a broken install, reported as it is.
        if (e.name or "").partition(".")[0] != "sklearn":
            raise
        raise ModuleNotFoundError(
            "load_digits needs scikit-learn, which bundles the digits data; "
            "install it with `pip install scikit-learn`",
            name="sklearn",
        ) from None
    digits = sklearn_load_digits()
    images = digits.images[:, None].astype(np.float32) / 16
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    num_test = round(test_fraction * len(labels))
    keep = order[num_test:] if train else order[:num_test]
    return TensorDataset(from_numpy(images[keep]), from_numpy(labels[keep]))
