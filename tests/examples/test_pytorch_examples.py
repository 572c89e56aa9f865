"""pytorch/examples' MNIST script and its DDP example with only their imports changed (see the
scripts' headers), on random data of MNIST's shape. Each is also run on PyTorch (imports
swapped back) and prints the same lines, numbers aside."""
import functools
import importlib.util
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys

import pytest

from tests.distributed._environment import job_environment

HERE = pathlib.Path(__file__).parent


def _environment(**extra):
    # Buffered output, so that ranks sharing a pipe write whole lines.
    env = job_environment(**extra)
    env.pop("PYTHONUNBUFFERED", None)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    return env


def _torch_version(script, tmp_path):
    text = re.sub(r"^.*# torch: (.*)$", r"\1", (HERE / script).read_text(), flags=re.M)
    path = tmp_path / script
    path.write_text(text)
    return path


def _shape_of(output):
    """The output with every number replaced: what must match between the libraries."""
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", output).split("\n")


def _run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_mnist_example_runs_and_prints_what_torch_prints(tmp_path):
    args = ["--epochs", "2", "--log-interval", "1", "--batch-size", "32",
            "--test-batch-size", "50"]
    env = _environment(FAKE_MNIST_SIZES="96,100")
    # Both single processes at once, each on a core of its own.
    start = functools.partial(subprocess.Popen, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=tmp_path)
    running = {"ours": start([sys.executable, str(HERE / "mnist_main.py"), *args,
                              "--save-model"])}
    if importlib.util.find_spec("torch"):
        running["theirs"] = start([sys.executable,
                                   str(_torch_version("mnist_main.py", tmp_path)), *args])
    printed = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=900)
        assert process.returncode == 0, f"{name}: {err[-3000:]}"
        printed[name] = out
    ours = printed["ours"]
    losses = [float(v) for v in re.findall(r"Loss: (\S+)", ours)]
    assert len(losses) == 6 and all(0 < loss < 10 for loss in losses)
    accuracy = [int(v) for v in re.findall(r"Accuracy: (\d+)/100", ours)]
    assert len(accuracy) == 2
    import mpigrad as mg
    saved = mg.load(tmp_path / "mnist_cnn.pt", map_location="cpu", weights_only=True)
    assert sorted(saved) == ["conv1.bias", "conv1.weight", "conv2.bias", "conv2.weight",
                             "fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    pytest.importorskip("torch")
    assert _shape_of(ours) == _shape_of(printed["theirs"])


def _port():
    """A free port whose successor is free too: under torchrun, torchrun's store takes the
    port and mpigrad's rendezvous server the next."""
    while True:
        with socket.socket() as probe, socket.socket() as successor:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            try:
                successor.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


@pytest.mark.parametrize("size", [2, 3])
def test_ddp_example_under_mpiexec_keeps_the_ranks_equal(size, tmp_path):
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    out = _run(["timeout", "-k", "10", "600", mpiexec, "-n", str(size), sys.executable,
                str(HERE / "ddp_main.py")], env=_environment(EXAMPLE_PORT=_port()), cwd=tmp_path)
    for rank in range(size):
        assert f"Running basic DDP example on rank {rank}." in out
        assert f"Running DDP checkpoint example on rank {rank}." in out
    for demo in ("demo_basic", "demo_checkpoint"):
        sums = set(re.findall(rf"rank \d+ {demo} checksum (-?\d+\.\d+)", out))
        assert len(sums) == 1, f"{demo}: the ranks' parameters differ: {sums}"


def test_ddp_example_under_torchrun(tmp_path):
    """torchrun starts the processes; mpigrad joins them into one MPI world when they import
    it. (PyTorch cannot run this file under torchrun: the example's setup() overrides torchrun's
    MASTER_PORT, so its processes would wait for a store nobody starts.)"""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun (PyTorch, the oracle extra) is not installed")
    out = _run([torchrun, "--nproc_per_node=2", f"--master_port={_port()}",
                str(HERE / "ddp_main.py")], env=_environment(), cwd=tmp_path)
    # torchrun hands both processes one pipe, so their lines may run together: match the
    # messages, not lines.
    assert sorted(re.findall(r"Running (basic DDP|DDP checkpoint) example on rank (\d+)\.",
                             out)) == sorted((kind, str(rank))
                                             for kind in ("DDP checkpoint", "basic DDP")
                                             for rank in (0, 1))
    for demo in ("demo_basic", "demo_checkpoint"):
        assert len(set(re.findall(rf"rank \d+ {demo} checksum (-?\d+\.\d+)", out))) == 1
    assert "rank 1 demo_basic" in out
