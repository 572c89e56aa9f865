"""torch.utils.data.dataset's path to mpigrad's datasets."""
from mpigrad.data import (ChainDataset, ConcatDataset, Dataset, IterableDataset,  # noqa: F401
                          StackDataset, Subset, TensorDataset, random_split)
