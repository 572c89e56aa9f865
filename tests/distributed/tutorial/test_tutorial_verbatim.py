"""PyTorch's distributed tutorial with only its imports changed (tutorial/dist_tuto.py).

Under MPI (2 and 3 ranks) each code block runs on the session's process group and prints what
torch's tutorial prints. The serial tests launch the whole script with `mpiexec -n 2|3`, once
with the tutorial's MPI preamble (`init_process(0, 0, run, backend='mpi')`) and once with its
gloo preamble (`init_process_group('gloo', rank=rank, world_size=size)`), and compare the
output with PyTorch running the same file (imports swapped back) under the tutorial's own
multiprocessing launcher; mpigrad runs it under that launcher too. Each launch runs every
block of its world size in turn (one world, one launch), and each block's lines are compared
on their own."""
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

import mpigrad.distributed as dist

from .._environment import job_environment
from . import dist_tuto

HERE = pathlib.Path(__file__).parent
SCRIPT = HERE / "dist_tuto.py"


def _printed(text, block):
    """The lines of `block` reporting data, whitespace normalised, sorted (the ranks print in
    any order)."""
    prefix = f"{block}: "
    return sorted(" ".join(line[len(prefix):].split()) for line in text.splitlines()
                  if line.startswith(prefix) and "has data" in line)


@pytest.mark.mpi(min_size=2)
def test_blocking_point_to_point(rank, size, capsys):
    if rank < 2:  # the block sends from rank 0 to rank 1 only
        dist_tuto.run_blocking(rank, size)
    assert capsys.readouterr().out.split() == (["Rank", str(rank), "has", "data", "tensor(1.)"]
                                               if rank < 2 else [])


@pytest.mark.mpi(min_size=2)
def test_nonblocking_point_to_point(rank, size, capsys):
    if rank < 2:
        dist_tuto.run_nonblocking(rank, size)
    words = capsys.readouterr().out.split()
    if rank < 2:
        assert words[:2] == ["Rank", str(rank)] and words[-5:] == ["Rank", str(rank), "has",
                                                                   "data", "tensor(1.)"]


@pytest.mark.mpi(min_size=2)
def test_all_reduce_on_a_group_of_two(rank, size, capsys):
    with pytest.warns(UserWarning) if rank >= 2 else _nothing():
        dist_tuto.run_all_reduce(rank, size)
    expected = "tensor(2.)" if rank < 2 else "tensor(1.)"  # rank 2 is not in the group
    assert capsys.readouterr().out.split()[-1] == expected


@pytest.mark.mpi(min_size=2)
def test_ring_all_reduce_by_hand(rank, size, capsys):
    dist_tuto.run_ring(rank, size)
    expected = np.arange(4.0) * size + 10 * size * (size - 1) / 2
    printed = capsys.readouterr().out
    values = [float(v) for v in re.findall(r"-?\d+\.?\d*", printed.split("tensor")[-1])]
    np.testing.assert_array_equal(values, expected)


@pytest.mark.mpi(min_size=2)
def test_training_with_average_gradients_keeps_the_ranks_in_step(rank, size, capsys):
    model = dist_tuto.run_training(rank, size)
    lines = [line for line in capsys.readouterr().out.splitlines() if "epoch" in line]
    assert len(lines) == 3 and all(np.isfinite(float(line.split(":")[-1])) for line in lines)
    weights = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    everyone = [None] * size
    dist.all_gather_object(everyone, weights.tolist())
    for other in everyone:
        np.testing.assert_array_equal(other, weights)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _environment(**extra):
    # Buffered output: each process then writes its lines at once, so the ranks' prints (which
    # share one pipe) cannot interleave mid-line.
    env = job_environment(**extra)
    env.pop("PYTHONUNBUFFERED", None)
    return env


def _port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _torch_version(tmp_path):
    """The same file with the `# torch:` import lines swapped in, its launcher forking the
    ranks instead of spawning them: a spawned rank imports torch again (2 s of CPU each, two
    thirds of the oracle's cost), and what the blocks print does not depend on how the
    processes started. (mpigrad's own run keeps the tutorial's spawn.) Forced: one process
    runs the launcher once per world size."""
    text = SCRIPT.read_text()
    text = re.sub(r"^.*# torch: (.*)$", r"\1", text, flags=re.M)
    spawn = 'mp.set_start_method("spawn")'
    assert text.count(spawn) == 1, "the tutorial's launcher no longer sets the spawn method"
    text = text.replace(spawn, 'mp.set_start_method("fork", force=True)')
    path = tmp_path / "dist_tuto_torch.py"
    path.write_text(text)
    return path


BLOCKS = {2: ["blocking", "nonblocking", "all_reduce", "ring"], 3: ["all_reduce", "ring"]}
_torch_outputs = {}
# Runs the script's launcher (`python SCRIPT BLOCKS spawn SIZE`) for each world size in turn,
# in one interpreter, each world on a port of its own and its output after a "world SIZE"
# line: one torch import for all the oracle's worlds instead of one per world.
_EACH_WORLD = """
import os, runpy, sys
script, worlds = sys.argv[1], sys.argv[2:]
for size, blocks, port in zip(worlds[::3], worlds[1::3], worlds[2::3]):
    print("world", size, flush=True)  # flushed: each forked rank inherits the buffer
    os.environ["TUTORIAL_PORT"] = port
    sys.argv = [script, blocks, "spawn", size]
    runpy.run_path(script, run_name="__main__")
    sys.stdout.flush()
"""


def _torch_output(size, tmp_path):
    """PyTorch's output for every block of a world size; its run for every size is made once,
    on the first call (each preamble and launcher compares with it)."""
    if not _torch_outputs:
        worlds = [str(value) for size, blocks in BLOCKS.items()
                  for value in (size, ",".join(blocks), _port())]
        theirs = subprocess.run([sys.executable, "-c", _EACH_WORLD,
                                 str(_torch_version(tmp_path)), *worlds],
                                env=_environment(), capture_output=True, text=True,
                                timeout=300, cwd=tmp_path)
        assert theirs.returncode == 0, theirs.stderr
        for printed in re.split(r"^world ", theirs.stdout, flags=re.M)[1:]:
            world, lines = printed.split("\n", 1)
            _torch_outputs[int(world)] = lines
        assert sorted(_torch_outputs) == sorted(BLOCKS), theirs.stdout
    return _torch_outputs[size]


def _assert_prints_what_torch_prints(ours, size, tmp_path):
    assert ours.returncode == 0, ours.stderr
    for block in BLOCKS[size]:
        assert _printed(ours.stdout, block) == _printed(_torch_output(size, tmp_path), block)
        assert len(_printed(ours.stdout, block)) == (
            2 if block in ("blocking", "nonblocking") else size), (block, ours.stdout)


@pytest.mark.mpi_skip
@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("preamble", ["mpi", "gloo"])
def test_the_script_under_mpiexec_prints_what_torch_prints(size, preamble, tmp_path):
    pytest.importorskip("torch")
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    ours = subprocess.run(["timeout", "-k", "10", "300", mpiexec, "-n", str(size),
                           sys.executable, str(SCRIPT), ",".join(BLOCKS[size]), preamble],
                          env=_environment(), capture_output=True, text=True)
    _assert_prints_what_torch_prints(ours, size, tmp_path)


@pytest.mark.mpi_skip
@pytest.mark.parametrize("size", [2, 3])
def test_the_tutorials_own_launcher_prints_what_torch_prints(size, tmp_path):
    """The tutorial's mp.Process launcher: plain python processes, each setting MASTER_ADDR
    and MASTER_PORT after importing the library, then init_process_group('gloo', rank=rank,
    world_size=size). They form one world of `size` ranks (MPI starts at init_process_group)."""
    pytest.importorskip("torch")
    ours = subprocess.run(["timeout", "-k", "10", "300", sys.executable, str(SCRIPT),
                           ",".join(BLOCKS[size]), "spawn", str(size)],
                          env=_environment(TUTORIAL_PORT=_port()), capture_output=True,
                          text=True)
    _assert_prints_what_torch_prints(ours, size, tmp_path)
