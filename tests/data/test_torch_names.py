"""Every public name of torch.utils.data (and of its dataset, sampler and dataloader
modules) that a program can use is in mpigrad.utils.data; only the DataPipes are not."""
import importlib

import pytest

torch = pytest.importorskip("torch")

# DataPipes (and their typing and graph helpers), a separate library torch keeps here.
DATAPIPES = {"DFIterDataPipe", "DataChunk", "IterDataPipe", "MapDataPipe", "argument_validation",
             "datapipes", "functional_datapipe", "graph", "graph_settings",
             "guaranteed_datapipes_determinism", "non_deterministic", "runtime_validation",
             "runtime_validation_disabled"}


@pytest.mark.parametrize("module, names", [
    ("", None),
    (".dataset", "__all__"),
    (".sampler", "__all__"),
    (".dataloader", ["DataLoader", "default_collate", "default_convert", "get_worker_info"]),
])
def test_torchs_names_are_all_here(module, names):
    theirs = importlib.import_module("torch.utils.data" + module)
    ours = importlib.import_module("mpigrad.utils.data" + module)
    wanted = (getattr(theirs, names) if isinstance(names, str) else names) or [
        name for name in dir(theirs) if not name.startswith("_")]
    assert sorted(set(wanted) - set(dir(ours)) - DATAPIPES) == []
