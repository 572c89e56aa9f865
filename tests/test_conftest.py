"""The rule tests/conftest.py enforces: every module under tests/distributed has a test that
runs on several ranks. Checked on a throw-away test tree with that conftest."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ALL_SERIAL = """
import pytest

@pytest.mark.mpi_skip
def test_only_here():
    pass
"""
SOME_MPI = ALL_SERIAL + """

def test_on_every_rank():
    pass
"""


@pytest.mark.parametrize("module,exit_code", [(ALL_SERIAL, 4), (SOME_MPI, 0)],
                         ids=["all-mpi_skip", "one-multi-rank"])
def test_module_without_a_multi_rank_test_fails_collection(module, exit_code, tmp_path):
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "distributed").mkdir()
    (tmp_path / "distributed" / "test_example.py").write_text(module)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "--rootdir", str(tmp_path), str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == exit_code, result.stdout + result.stderr
    if exit_code:
        assert "test_example.py: every test is marked mpi_skip" in result.stderr
