"""`python -m mpigrad.compat script.py ARGS` runs PyTorch scripts with no change at all: a
training script prints the losses real torch prints (float64), a name mpigrad lacks fails
with a message naming it, and a DDP script runs under mpiexec through the alias."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.distributed._environment import job_environment

TRAINING = textwrap.dedent('''
    import sys

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_default_dtype(torch.float64)
    x = torch.linspace(-2, 2, 64).reshape(32, 2)
    y = (x[:, :1] * 1.5 - x[:, 1:] * 0.5).tanh()


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(2, 8)
            self.fc2 = nn.Linear(8, 1)

        def forward(self, x):
            return self.fc2(F.tanh(self.fc1(x)))


    model = Net()
    with torch.no_grad():  # weights both libraries can make: no random numbers
        for i, p in enumerate(model.parameters()):
            values = torch.cos(torch.arange(p.numel(), dtype=torch.float64) + i)
            p.copy_(values.reshape(p.shape) / 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=False)
    for epoch in range(3):
        total = 0.0
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total:.15e}")
    torch.save(model.state_dict(), sys.argv[1])
    print("saved", sorted(torch.load(sys.argv[1])), "argv", sys.argv[2:])
''')


def _run(args, tmp_path, expect_ok=True, timeout=300):
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                            cwd=tmp_path, env=job_environment())
    if expect_ok:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_torch_training_script_prints_torchs_losses(tmp_path):
    torch = pytest.importorskip("torch")
    del torch
    script = _script(tmp_path, "train.py", TRAINING)
    ours = _run([sys.executable, "-m", "mpigrad.compat", script, "ours.pt", "--flag", "1"],
                tmp_path).stdout
    theirs = _run([sys.executable, script, "theirs.pt", "--flag", "1"], tmp_path).stdout
    losses = [float(v) for v in re.findall(r"loss (\S+)", ours)]
    expected = [float(v) for v in re.findall(r"loss (\S+)", theirs)]
    assert len(losses) == len(expected) == 3
    np.testing.assert_allclose(losses, expected, rtol=1e-10)
    assert ours.splitlines()[-1] == theirs.splitlines()[-1] == (
        "saved ['fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight'] argv ['--flag', '1']")


@pytest.mark.parametrize("line,name", [
    ("from torch import no_such_function", "torch.no_such_function"),
    ("import torch.no_such_module", "torch.no_such_module"),
    ("import torch.nn.functional as F\nF.no_such_op", "torch.nn.functional.no_such_op"),
])
def test_a_name_mpigrad_lacks_fails_naming_it(tmp_path, line, name):
    script = _script(tmp_path, "missing.py", f"import torch\n{line}\n")
    result = _run([sys.executable, "-m", "mpigrad.compat", script], tmp_path, expect_ok=False)
    assert result.returncode != 0
    assert f"{name} is not provided by mpigrad; see docs/porting.md" in result.stderr


def test_packages_built_on_torchs_core_are_not_aliased(tmp_path):
    script = _script(tmp_path, "vision.py", "import torch\nimport torchvision\n")
    result = _run([sys.executable, "-m", "mpigrad.compat", script], tmp_path, expect_ok=False)
    assert "torchvision is built on PyTorch's C++ core and is not aliased" in result.stderr


def test_spawned_children_import_torch_through_the_alias(tmp_path):
    """mp.spawn starts fresh interpreters that re-import the script: they get mpigrad too."""
    script = _script(tmp_path, "spawner.py", textwrap.dedent('''
        import torch
        import torch.multiprocessing as mp

        def run(rank, scale):
            print(f"child {rank} {torch.__name__} {(torch.ones(2) * scale).sum().item()};",
                  flush=True)

        if __name__ == "__main__":
            mp.spawn(run, args=(3,), nprocs=2)
            print("parent done")
    '''))
    out = _run([sys.executable, "-m", "mpigrad.compat", script], tmp_path).stdout
    assert sorted(re.findall(r"child (\d) (\w+) (\S+);", out)) == [
        ("0", "mpigrad", "6.0"), ("1", "mpigrad", "6.0")]
    assert out.count("parent done") == 1


DDP = textwrap.dedent('''
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_default_dtype(torch.float64)
    x = torch.linspace(-1, 1, 12 * world).reshape(4 * world, 3)
    y = x.sum(1, keepdim=True).sin()

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))

    model, alone = DDP(net()), net()
    shard = slice(4 * rank, 4 * rank + 4)
    nn.functional.mse_loss(model(x[shard]), y[shard]).backward()
    nn.functional.mse_loss(alone(x), y).backward()
    worst = max((a.grad - b.grad).abs().max().item()
                for a, b in zip(model.module.parameters(), alone.parameters()))
    print(f"rank {rank} of {world} worst {worst:.3e};", flush=True)
    dist.destroy_process_group()
''')


def test_a_ddp_script_under_mpiexec_through_the_alias(tmp_path):
    """Two ranks with half the batch each get the whole batch's gradients."""
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    script = _script(tmp_path, "ddp.py", DDP)
    out = _run(["timeout", "-k", "10", "120", mpiexec, "-n", "2", sys.executable, "-m",
                "mpigrad.compat", script], tmp_path, timeout=180).stdout
    # The ranks share a pipe, so their lines may run together: match the messages.
    worst = sorted(re.findall(r"rank (\d) of 2 worst ([^;]+);", out))
    assert [rank for rank, _ in worst] == ["0", "1"], out
    assert all(float(value) < 1e-12 for _, value in worst), out
