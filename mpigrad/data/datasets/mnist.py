"""MNIST from its IDX files on disk (never downloaded)."""
import os

import numpy as np

from ...creation import from_numpy
from ..dataset import TensorDataset
from .idx import read_idx


def _locate(root, name):
    """The path of `name` or `name.gz` under `root` or `root/MNIST/raw`
    (where torchvision keeps its copy)."""
    candidates = [
        os.path.join(folder, name + suffix)
        for folder in (root, os.path.join(root, "MNIST", "raw"))
        for suffix in ("", ".gz")
    ]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"MNIST file {name} not found; looked for {', '.join(candidates)}. "
        "mpigrad does not download data: put the MNIST IDX files (plain or .gz) in root"
    )


class MNIST(TensorDataset):
    """The MNIST digits read from `root`: 60,000 training images, or with
    `train=False` the 10,000 test images.

    `root` holds `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
    `t10k-images-idx3-ubyte` and `t10k-labels-idx1-ubyte`, each plain or
    gzipped (`.gz`), directly or in `MNIST/raw`. The format is checked
    strictly; any IDX file pair of the same layout (Fashion-MNIST, KMNIST)
    reads as well.

    Samples are `(image, label)`: a float32 image of shape `(1, 28, 28)`
    with values in [0, 1], and an int64 label.
    """

    def __init__(self, root, train=True):
        prefix = "train" if train else "t10k"
        images_path = _locate(root, f"{prefix}-images-idx3-ubyte")
        labels_path = _locate(root, f"{prefix}-labels-idx1-ubyte")
        images, labels = read_idx(images_path), read_idx(labels_path)
        if images.dtype != np.uint8 or images.ndim != 3:
            raise ValueError(
                f"{images_path}: expected 3-d unsigned-byte images (count, rows, columns), "
                f"got {images.ndim}-d {images.dtype}"
            )
        if labels.dtype != np.uint8 or labels.ndim != 1:
            raise ValueError(
                f"{labels_path}: expected 1-d unsigned-byte labels, "
                f"got {labels.ndim}-d {labels.dtype}"
            )
        if len(images) != len(labels):
            raise ValueError(
                f"{images_path} has {len(images)} images but {labels_path} has {len(labels)} labels"
            )
        self.root, self.train = root, train
        super().__init__(
            from_numpy(images[:, None].astype(np.float32) / 255),
            from_numpy(labels.astype(np.int64)),
        )
