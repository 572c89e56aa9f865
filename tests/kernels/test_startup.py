"""Nothing compiles at import: numba is imported by a fused kernel's first call, not by
`import mpigrad` (nor by building a model and its optimizer). The loops' disk cache: keyed by
every file of their package, and optional."""
import shutil
import subprocess
import sys

import pytest

PROGRAM = """
import sys
import mpigrad as mg
model = mg.nn.Sequential(mg.nn.Linear(4, 4), mg.nn.GELU(), mg.nn.LayerNorm(4))
optimizer = mg.optim.AdamW(model.parameters())
print("numba" in sys.modules)
model(mg.ones(2, 4))
print("numba" in sys.modules)
# numba's tables were filled without scipy.linalg (0.4-0.8 s of a warm start), and numba
# still finds BLAS when a function needs it
print("scipy.linalg" in sys.modules)
import numba
import numpy as np
print(numba.njit(lambda a: np.dot(a, a))(np.ones(3)) == 3.0)
"""


def test_numba_is_imported_on_first_use_only():
    out = subprocess.run([sys.executable, "-c", PROGRAM], check=True, capture_output=True,
                         text=True, timeout=300).stdout.split()
    assert out == ["False", "True", "False", "True"]


def test_the_cache_is_keyed_by_every_file_of_the_package(tmp_path):
    from mpigrad.kernels.compiled import _cache, activations
    package = tmp_path / "compiled"
    shutil.copytree(_cache._HERE, package, ignore=shutil.ignore_patterns("__pycache__"))
    before = _cache.package_stamp(str(package))
    assert before == _cache.package_stamp(_cache._HERE)
    # a helper's file changed: numba alone would keep loading loops that inlined the old one
    with open(package / "_math.py", "a") as source:
        source.write("\n")
    assert _cache.package_stamp(str(package)) != before
    locator = activations.silu.serial._cache._impl.locator
    assert isinstance(locator, _cache.PackageLocator)
    assert locator.get_source_stamp() == before


def test_no_writable_cache_directory_compiles_uncached(monkeypatch):
    from numba.core import caching

    from mpigrad.kernels.compiled import _math
    implementation = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # numba < 0.65
    monkeypatch.setattr(implementation, "_locator_classes", [])
    monkeypatch.setattr(_math, "_uncached", [])

    def double(x):
        return 2 * x

    with pytest.warns(RuntimeWarning, match="NUMBA_CACHE_DIR"):
        loop = _math.jit(double)
    assert loop(4) == 8


def test_a_read_only_package_caches_in_the_users_directory(monkeypatch, tmp_path):
    from numba.core import caching, config

    from mpigrad.kernels.compiled import _cache, activations
    monkeypatch.setattr(config, "CACHE_DIR", "")
    # a site-packages install the user cannot write: numba finds no __pycache__ to use
    monkeypatch.setattr(caching.InTreeCacheLocator, "from_function",
                        classmethod(lambda cls, py_func, py_file: None))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    function = activations.silu.function
    locator = _cache.PackageLocator.from_function(function, function.__code__.co_filename)
    assert isinstance(locator, _cache.PackageLocator)
    assert locator.get_cache_path().startswith(str(tmp_path))
