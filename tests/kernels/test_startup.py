"""Nothing compiles at import: numba is imported by a fused kernel's first call, not by
`import mpigrad` (nor by building a model and its optimizer). The loops' disk cache: keyed by
every file of their package, optional, and shared by processes compiling side by side."""
import importlib.util
import os
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
mg.nn.functional.gelu(mg.ones(2, 4))  # one loop: compiled on a cold cache, else loaded
print("numba" in sys.modules)
# numba's tables of implementations: filled for a compile, not for a load from the cache
print("numba.np.linalg" in sys.modules)
# and filled without scipy.linalg (0.4-0.8 s of a start)
print("scipy.linalg" in sys.modules)
# numba still compiles what needs its tables, and finds BLAS when a function needs it
import numba
import numpy as np
print(numba.njit(lambda a: np.dot(a, a))(np.ones(3)) == 3.0)
"""


def test_numba_is_imported_on_first_use_only_and_a_load_fills_no_tables(tmp_path):
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    cold, warm = (subprocess.run([sys.executable, "-c", PROGRAM], check=True,
                                 capture_output=True, text=True, timeout=300,
                                 env=environment).stdout.split() for _ in range(2))
    assert cold == ["False", "True", "True", "False", "True"]
    assert warm == ["False", "True", "False", "False", "True"]


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
    locator = activations.silu_f32.serial._cache._impl.locator
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
    function = activations.silu_f32.function
    locator = _cache.PackageLocator.from_function(function, function.__code__.co_filename)
    assert isinstance(locator, _cache.PackageLocator)
    assert locator.get_cache_path().startswith(str(tmp_path))


# A loop in a module of its own (numba caches only those), called by a program in another
# process and imported by the test, which then holds the loop's turn to compile as a rank
# compiling it would. The program prints once it calls the loop, then its cache hits, its
# compiles and how long the call took.
LOOP_MODULE = """
from mpigrad.kernels.compiled import _math


def triple(x):
    return 3 * x


loop = _math.jit(triple)
"""
CALLS_THE_LOOP = """
import sys
import time

from mpigrad.kernels.compiled import _cache
from a_loop import loop

_cache.WAIT_SECONDS = float(sys.argv[1])
print("calling", flush=True)
start = time.monotonic()
assert loop(2) == 6
took = time.monotonic() - start
print(sum(loop.stats.cache_hits.values()), sum(loop.stats.cache_misses.values()), took)
"""


@pytest.fixture
def loop_program(tmp_path, monkeypatch):
    """(the program's path, the loop as imported here, the program's environment), the loop
    cached in a directory of the test's own."""
    from numba.core import config
    cache = tmp_path / "cache"
    monkeypatch.setattr(config, "CACHE_DIR", str(cache))
    (tmp_path / "a_loop.py").write_text(LOOP_MODULE)
    program = tmp_path / "calls_the_loop.py"
    program.write_text(CALLS_THE_LOOP)
    spec = importlib.util.spec_from_file_location("a_loop", tmp_path / "a_loop.py")
    module = importlib.util.module_from_spec(spec)
    # imported, as the program imports it: numba's cache names the module the loop's
    # globals come from
    monkeypatch.setitem(sys.modules, "a_loop", module)
    spec.loader.exec_module(module)
    return program, module.loop, {**os.environ, "NUMBA_CACHE_DIR": str(cache)}


def _start_calling(program, environment, wait_seconds):
    process = subprocess.Popen([sys.executable, str(program), str(wait_seconds)],
                               env=environment, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "calling\n"
    return process


def _hits_compiles_seconds(process):
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0
    hits, compiles, took = out.split()
    return int(hits), int(compiles), float(took)


def test_a_process_waits_for_the_loop_another_compiles_and_loads_it(loop_program):
    from numba import types

    from mpigrad.kernels.compiled import _cache
    program, loop, environment = loop_program
    signature = (types.int64,)
    with _cache.turn_to_compile(loop, signature) as held:
        assert held
        other = _start_calling(program, environment, wait_seconds=300)
        # numba's own compile (not the turn-taking one): it compiles and saves while the
        # other process is calling; without the turn that one would find no cache and compile
        type(loop).compile(loop, signature)
    assert _hits_compiles_seconds(other)[:2] == (1, 0)


def test_a_turn_held_too_long_is_taken_by_compiling_anyway(loop_program):
    from numba import types

    from mpigrad.kernels.compiled import _cache
    program, loop, environment = loop_program
    with _cache.turn_to_compile(loop, (types.int64,)) as held:
        assert held
        hits, compiles, took = _hits_compiles_seconds(
            _start_calling(program, environment, wait_seconds=0.3))
    assert (hits, compiles) == (0, 1) and took >= 0.3


WIDTH_PROGRAM = """
import numba
import mpigrad.kernels.compiled  # as a kernel's first call does; no loop need compile
print(numba.config.CPU_FEATURES)
"""


@pytest.mark.parametrize("numba_setting", [None, "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"])
def test_loops_use_the_full_vector_width_unless_numba_is_told_otherwise(numba_setting):
    from llvmlite import binding
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")}
    if numba_setting == "NUMBA_CPU_NAME":
        environment["NUMBA_CPU_NAME"] = "generic"
    elif numba_setting == "NUMBA_CPU_FEATURES":
        environment["NUMBA_CPU_FEATURES"] = binding.get_host_cpu_features().flatten()
    features = subprocess.run([sys.executable, "-c", WIDTH_PROGRAM], check=True,
                              capture_output=True, text=True, timeout=300,
                              env=environment).stdout.strip()
    if numba_setting == "NUMBA_CPU_NAME":  # numba's own default for a generic CPU
        assert features == ""
    elif numba_setting == "NUMBA_CPU_FEATURES":
        assert features == environment["NUMBA_CPU_FEATURES"]
    elif binding.get_host_cpu_features().get("avx512f"):
        assert features.endswith(",-prefer-256-bit") and "+avx512f" in features
    else:
        assert features == "None"


def test_a_small_models_forward_and_backward_leave_numba_unimported():
    # linear's compiled addmm is for outputs of COMPILED_FROM elements and more: a small MLP's
    # forward and backward with a squared error need no compiled loop, nor a small
    # convnet's. A first loop in the
    # forward made each rank of a DDP job import numba (and on a cold cache wait for its
    # turn to compile) between two collectives, which outlasted the group's 4 s timeout.
    program = """
import sys
import mpigrad as mg
model = mg.nn.Sequential(mg.nn.Linear(8, 16), mg.nn.Tanh(), mg.nn.Linear(16, 4))
((model(mg.randn(5, 8)) - mg.randn(5, 4)) ** 2).mean().backward()
# nor a small convnet's: its convolutions' direct loops and compiled crop start at the
# same size as addmm
convnet = mg.nn.Sequential(mg.nn.Conv2d(3, 8, 3, padding=1), mg.nn.Tanh(),
                           mg.nn.Conv2d(8, 4, 5), mg.nn.Flatten())
convnet(mg.randn(2, 3, 32, 32)).square().mean().backward()
print("numba" in sys.modules)
"""
    assert subprocess.run([sys.executable, "-c", program], check=True, capture_output=True,
                          text=True, timeout=300).stdout.split() == ["False"]
