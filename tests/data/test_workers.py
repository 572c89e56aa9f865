"""DataLoader(num_workers=k): batches really come from k worker processes, in sampler order,
seeded as PyTorch seeds its workers, and the workers go away on errors and when dropped."""
import gc
import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.data import DataLoader, worker


@pytest.fixture(autouse=True)
def importable_datasets(monkeypatch):
    # Spawned workers unpickle the datasets by module name, so their folder must be on
    # sys.path, which spawn hands on to the children.
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parent))


def _datasets():
    import worker_datasets
    return worker_datasets


def _alive(pool_processes):
    return [p for p in pool_processes if p.is_alive()]


def test_batches_come_from_the_workers_in_sampler_order():
    ds = _datasets()
    serial = [b for b in DataLoader(ds.Squares(23), batch_size=4)]
    loader = DataLoader(ds.Squares(23), batch_size=4, num_workers=2, prefetch_factor=3)
    parallel = list(loader)
    assert len(parallel) == len(serial) == 6
    for (x, y), (xs, ys) in zip(parallel, serial):
        assert x.dtype == np.float64 and y.dtype == np.int64
        np.testing.assert_array_equal(x.data, xs.data)
        np.testing.assert_array_equal(y.data, ys.data)


# One of each family a launcher sets, and torchrun's names: workers must inherit none of them.
_PLACED = {name: "0" for name in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "PRTE_MCA_x",
                                  "HYDRA_TOPO_DEBUG", "HYDI_CONTROL_FD", "MPI_LOCALRANKID",
                                  "MPIR_CVAR_X", "TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE",
                                  "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                                  "MASTER_PORT")}


def test_each_worker_is_its_own_process_seeded_like_torch_without_launcher_variables(monkeypatch):
    ds = _datasets()
    for name, value in _PLACED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MPIGRAD_NOT_A_LAUNCHER", "1")
    mg.manual_seed(5)
    loader = DataLoader(ds.WhoLoadedMe(), batch_size=2, num_workers=2,
                        collate_fn=ds.as_list)
    samples = [s for batch in loader for s in batch]
    mg.manual_seed(5)
    base_seed = mg.randint(2**63 - 1, size=()).item()  # the draw iter(loader) made
    assert {s["pid"] for s in samples}.isdisjoint({os.getpid()})
    assert {name: os.environ.get(name) for name in _PLACED} == _PLACED  # given back
    assert len({s["pid"] for s in samples}) == 2
    for s in samples:
        # Round-robin: batch b (two samples) goes to worker b % 2.
        assert s["worker"] == (s["index"] // 2) % 2 and s["num_workers"] == 2
        assert s["seed"] == base_seed + s["worker"]
        assert s["environment"].isdisjoint(_PLACED) and "MPIGRAD_NOT_A_LAUNCHER" in s["environment"]
    first_of_worker = {s["worker"]: s for s in samples if s["index"] in (0, 2)}
    for worker_id, s in first_of_worker.items():
        seed = base_seed + worker_id
        expected_numpy = np.random.RandomState(worker.numpy_seed(base_seed, worker_id)).random()
        import random
        assert s["python"] == random.Random(seed).random()
        assert s["numpy"] == expected_numpy
        assert s["mpigrad"] == mg.rand((), generator=mg.Generator(seed)).item()


def test_workers_run_one_thread_each_as_torchs_do():
    ds = _datasets()
    before = mg.get_num_threads()
    mg.set_num_threads(2)
    try:
        batches = list(DataLoader(ds.WhoLoadedMe(), batch_size=2, num_workers=2,
                                  collate_fn=ds.as_list))
        assert {sample["threads"] for batch in batches for sample in batch} == {1}
        assert mg.get_num_threads() == 2
    finally:
        mg.set_num_threads(before)


def test_numpy_seed_is_torchs():
    torch_worker = pytest.importorskip("torch.utils.data._utils.worker")
    for base_seed in (0, 1234, 2**62 + 12345, 2**63 - 2):
        for worker_id in (0, 3):
            assert list(worker.numpy_seed(base_seed, worker_id)) == \
                torch_worker._generate_state(base_seed, worker_id)


def test_worker_init_fn_runs_in_each_worker_after_seeding():
    ds = _datasets()
    loader = DataLoader(ds.WhoLoadedMe(), batch_size=4, num_workers=2,
                        worker_init_fn=ds.init_marks_worker, collate_fn=ds.as_list)
    draws = {s["worker"]: s["numpy"] for batch in loader for s in batch if s["index"] in (0, 4)}
    assert draws == {w: np.random.RandomState(1000 + w).random() for w in (0, 1)}


def test_a_workers_exception_is_raised_here_with_its_traceback_and_stops_the_workers():
    ds = _datasets()
    loader = DataLoader(ds.FailsAt(7), batch_size=2, num_workers=2)
    batches = iter(loader)
    processes = list(batches.pool.processes)
    with pytest.raises(RuntimeError, match=r"(?s)KeyError in DataLoader worker process 1.*"
                                           r"no sample 7"):
        list(batches)
    assert not _alive(processes)


def test_a_worker_that_dies_is_an_error_not_a_hang():
    ds = _datasets()
    batches = iter(DataLoader(ds.DiesAt(5), batch_size=2, num_workers=2))
    processes = list(batches.pool.processes)
    with pytest.raises(RuntimeError, match="exited unexpectedly.*exit code 3"):
        list(batches)
    assert not _alive(processes)


def test_dropping_the_iterator_stops_the_workers():
    ds = _datasets()
    batches = iter(DataLoader(ds.Squares(100), batch_size=2, num_workers=2))
    next(batches)
    processes = list(batches.pool.processes)
    del batches
    gc.collect()
    deadline = time.monotonic() + 30
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(processes)


def test_persistent_workers_are_reused_across_passes_and_an_abandoned_pass_is_discarded():
    ds = _datasets()
    loader = DataLoader(ds.Squares(10), batch_size=3, num_workers=2, persistent_workers=True)
    first = iter(loader)
    processes = list(first.pool.processes)
    next(first)
    del first  # abandoned mid-pass: its queued batches must not leak into the next pass
    for _ in range(2):
        assert [y.data.tolist() for _, y in loader] == [[0, 1, 4], [9, 16, 25], [36, 49, 64],
                                                         [81]]
    assert loader._pool.processes == processes and len(_alive(processes)) == 2
    loader._pool.shutdown()
    assert not _alive(processes)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_workers=-1), "num_workers should be an integer >= 0"),
    (dict(prefetch_factor=2), "prefetch_factor option could only be specified"),
    (dict(persistent_workers=True), "persistent_workers option needs num_workers > 0"),
    (dict(timeout=-1), "timeout option should be non-negative"),
])
def test_bad_worker_options_are_refused(kwargs, message):
    ds = _datasets()
    with pytest.raises(ValueError, match=message):
        DataLoader(ds.Squares(4), **kwargs)


def test_pin_memory_warns_that_there_is_no_accelerator():
    ds = _datasets()
    with pytest.warns(UserWarning, match="no accelerator is found"):
        assert len(list(DataLoader(ds.Squares(4), batch_size=2, pin_memory=True))) == 2


def test_a_batch_that_cannot_be_pickled_is_an_error_in_the_main_process():
    """The queue's feeder thread used to print the pickling error and drop the batch, so the
    main process waited for it forever (timeout=0, the default)."""
    ds = _datasets()
    loader = DataLoader(ds.Unpicklable(), batch_size=2, num_workers=2, collate_fn=ds.as_is)
    with pytest.raises(RuntimeError, match=r"(?s)Caught TypeError in DataLoader worker "
                                           r"process 1\..*pickle"):
        list(loader)


_ORPHAN_PARENT = """
import os, sys, time
sys.path.insert(0, {folder!r})
from mpigrad.data import DataLoader
import worker_datasets

if __name__ == "__main__":
    loader = DataLoader(worker_datasets.WhoLoadedMe(), batch_size=2, num_workers=2,
                        collate_fn=worker_datasets.as_list, persistent_workers=True)
    pids = sorted({{s["pid"] for s in next(iter(loader))}} | {{p.pid for p in loader._pool.processes}})
    print(" ".join(map(str, pids)), flush=True)
    time.sleep(600)
"""


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_exit_when_their_parent_is_killed_with_sigkill(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_PARENT.format(folder=str(pathlib.Path(__file__).parent)))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_running(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _running(pid)]
    finally:
        parent.kill()
        parent.wait()


_UNGUARDED_SCRIPT = """
import mpigrad as mg
from mpigrad.data import DataLoader, TensorDataset
print("top level ran", flush=True)
loader = DataLoader(TensorDataset(mg.arange(10) ** 2), batch_size=3, num_workers=2)
print([batch.tolist() for (batch,) in loader], flush=True)
"""


def _run(code, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(mg.__file__).parent.parent))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)


def test_a_script_without_a_main_guard_runs_its_top_level_once(tmp_path):
    # As torch on Linux: workers are forked while MPI is not initialised, so they do not
    # re-import the main script.
    done = _run(_UNGUARDED_SCRIPT, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["top level ran",
                                        "[[0, 1, 4], [9, 16, 25], [36, 49, 64], [81]]"]


def test_workers_are_spawned_and_fork_refused_once_mpi_is_initialised(tmp_path):
    done = _run("""
from mpi4py import MPI
from mpigrad.data import DataLoader, TensorDataset, worker
import mpigrad as mg
assert MPI.Is_initialized()
print(worker.start_method(None).get_start_method())
try:
    DataLoader(TensorDataset(mg.arange(3)), num_workers=1, multiprocessing_context="fork")
except ValueError as error:
    print("refused:", "'fork' is refused" in str(error))
""", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["spawn", "refused: True"]
    # Here the default is torch's, unless an earlier test of this process initialised MPI.
    expected = "spawn" if worker.mpi_initialized() else multiprocessing.get_start_method()
    assert worker.start_method(None).get_start_method() == expected
