"""torch.utils.data.dataset's path to mpigrad's datasets."""
from mpigrad.data import Dataset, Subset, TensorDataset, random_split  # noqa: F401
