"""Concrete datasets, as `TensorDataset`s: scikit-learn's digits (real 8x8 images, bundled
with scikit-learn), MNIST from its IDX files (with the IDX reader and writer), and synthetic
images for benchmarks and tests. The loader framework they plug into is `mpigrad.data`."""
from .digits import load_digits
from .idx import read_idx, write_idx
from .mnist import MNIST
from .synthetic import SyntheticImages

__all__ = ["MNIST", "SyntheticImages", "load_digits", "read_idx", "write_idx"]
