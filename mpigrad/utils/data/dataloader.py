"""torch.utils.data.dataloader's path to mpigrad's DataLoader and its helpers."""
from mpigrad.data import (DataLoader, default_collate, default_convert,  # noqa: F401
                          get_worker_info)
