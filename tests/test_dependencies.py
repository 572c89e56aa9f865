"""What mpigrad needs at run time and does not import itself is declared in setup.cfg's
install_requires, so that the README's `pip install` brings it: compiled/_blas.py's gemm
(like numba's np.dot, through the same helper) calls BLAS through scipy, and without scipy
the first attention kills the interpreter."""
import configparser
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _install_requires():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    return {re.split(r"[<>=!;\s\[]", line.strip(), maxsplit=1)[0].lower()
            for line in lines if line.strip() and not line.strip().startswith("#")}


def test_compiled_loops_calling_blas_bring_scipy():
    users = [path.name for path in (ROOT / "mpigrad/kernels/compiled").glob("*.py")
             if re.search(r"\bnp\.dot\(|numba_xxgemm", path.read_text())]
    assert users, "no compiled loop calls BLAS any more: this test can go"
    assert "scipy" in _install_requires(), f"{users} call BLAS through scipy"

