"""The data tests' helper modules (torch_twins, range_streams, worker_datasets) importable by name: from
the test modules (pytest imports them with importlib, so their folder is not on sys.path)
and from spawned DataLoader workers, which unpickle datasets by module name and are handed
this process's sys.path."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
