"""torch.utils.data.dataloader's path to mpigrad's DataLoader and its helpers."""
from mpigrad.data import DataLoader, default_collate, get_worker_info  # noqa: F401
