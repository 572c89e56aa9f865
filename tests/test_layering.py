"""The import layering that docs/architecture.md describes, checked on the source.

A module's top-level imports may reach its own layer or a lower one; the one exception is the
last line of tensor.py, which brings in the layers that define Tensor's operators and
backward(). An import inside a function must say in a comment why it cannot be at the top.

Arrays are the kernels' business: numpy is imported in ops/ (the rules' one-line forwards),
kernels/ and distributed/buffers.py (MPI's buffers); anywhere else it needs a reason in
NUMPY_ALLOWED, so that what a second backend (CuPy) would have to reach is written down.
"""
import ast
import pathlib
import subprocess
import sys

import pytest

import mpigrad

ROOT = pathlib.Path(mpigrad.__file__).parent

# Lowest first. A module not named here belongs to its package's entry. The entries from
# distributed's vocabulary on are mpigrad.distributed's rooms (see docs/architecture.md).
D = "mpigrad.distributed"
LAYERS = [
    {"mpigrad.hooks", "mpigrad.dtypes", "mpigrad.random", "mpigrad.futures", "mpigrad.device",
     "mpigrad.autograd.grad_mode", "mpigrad.autograd.anomaly", "mpigrad.autograd.graph",
     "mpigrad.autograd.engine", "mpigrad.launchers", "mpigrad._allocator",
     "mpigrad._blas_wait", "mpigrad._tensor_str"},
    {"mpigrad.kernels"},
    {"mpigrad.tensor"},
    {"mpigrad.ops", "mpigrad.autograd", "mpigrad.creation", "mpigrad.serialization",
     "mpigrad.sparse"},
    {"mpigrad.nn", "mpigrad.optim", "mpigrad.data", "mpigrad.utils", "mpigrad.func",
     "mpigrad.multiprocessing", "mpigrad.amp", "mpigrad.cpu",
     "mpigrad._dynamo", "mpigrad._compile"},
    {f"{D}.errors", f"{D}.settings", f"{D}.buffers", f"{D}.reduce_ops", f"{D}.launch"},
    {f"{D}.fault"},
    {f"{D}.process_group", f"{D}.work", f"{D}.ring", f"{D}.collectives", f"{D}.p2p",
     f"{D}.objects", f"{D}.nn"},
    {f"{D}.device_mesh"},
    {f"{D}.algorithms"},
    {f"{D}.ddp", "mpigrad.nn.parallel"},
    {f"{D}.rpc.constants", f"{D}.rpc.functions", f"{D}.rpc.wire", f"{D}.rpc.agent"},
    {f"{D}.autograd"},
    {f"{D}.rpc"},
    {f"{D}.optim"},
    {f"{D}.fsdp"},
    {f"{D}.checkpoint", f"{D}.pipelining"},
    {D, "mpigrad", "mpigrad.compat"},
]
UPWARD_IMPORTS_ALLOWED = {("mpigrad.tensor", "mpigrad.autograd"), ("mpigrad.tensor", "mpigrad.ops")}

# Where numpy may be imported without a reason: the kernels' rooms.
NUMPY_HOMES = ("mpigrad.ops", "mpigrad.kernels", "mpigrad.distributed.buffers")
# Everything else that imports numpy today, by module or package, and why. These are the
# places a CuPy backend would still have to reach (see docs/architecture.md); shrink it.
NUMPY_ALLOWED = {
    "mpigrad.tensor": "Tensor's storage is an ndarray; its methods convert and compare",
    "mpigrad.creation": "torch's factories build the storage array",
    "mpigrad._tensor_str": "a tensor prints from its storage array's values",
    "mpigrad.dtypes": "torch's dtype names are numpy dtypes",
    "mpigrad.amp": "the grad scaler keeps its scale as a float32 scalar and unscales gradients "
                   "in place in torch's order (float32 multiply, one rounding); autocast's "
                   "dtype is a numpy dtype",
    "mpigrad.random": "the generators are numpy Generators",
    "mpigrad.sparse": "a sparse tensor's storage is an index array and a values array; "
                      "coalescing sorts and sums them",
    "mpigrad.autograd": "the engine sums and zero-fills gradient arrays; gradcheck's finite "
                        "differences and functional's Jacobians assemble arrays",
    "mpigrad.data": "datasets read files into host arrays; collate and samplers index them",
    "mpigrad.serialization": "file formats are byte layouts of host arrays",
    "mpigrad.distributed": "MPI moves host buffers: flat gradient buckets, compression, index "
                           "arrays and pickled metadata around buffers.py's conversions",
    "mpigrad.nn.functional": "functional forms build index arrays, masks and shapes (argument "
                             "checks, pooling geometry, attention masks) next to their ops",
    "mpigrad.nn.init": "initializers draw with numpy's generators into the parameters",
    "mpigrad.nn.module": "to()/half()/double() cast parameter storage; dtype names",
    "mpigrad.nn.normalization": "the num_batches_tracked counter is an int64 array",
    "mpigrad.nn.parameter": "a Parameter wraps the array it is given",
    "mpigrad.nn.rnn": "packed sequences' batch sizes are read as integers",
    "mpigrad.nn.transformer": "the causal mask is built and recognised as an array",
    "mpigrad.nn.utils.rnn": "packing sorts lengths and builds integer index arrays",
    "mpigrad.nn.utils.clip_grad": "the total norm's reduction over parameters (to become a "
                                  "fused kernel)",
    "mpigrad.optim": "the optimizers' state is created as arrays (zeros, the accumulator's "
                     "fill); every update runs through the backend's one-pass kernels",
    "mpigrad.testing": "assert_close compares host arrays, as torch.testing does; the ranks "
                       "check and isolation move buffers through MPI",
}


def _module_name(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _layer(name):
    while name:
        for i, layer in enumerate(LAYERS):
            if name in layer:
                return i
        name = name.rpartition(".")[0]
    return None


def _targets(node, module, is_package):
    """The mpigrad modules an import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        base = node.module
    else:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = package + ("." + node.module if node.module else "")
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports(path):
    """(node, inside_a_function) for every import of an mpigrad module in the file."""
    tree = ast.parse(path.read_text())
    module = _module_name(path)
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function, _targets(child, module, path.name == "__init__.py")))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    visit(tree, False)
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_top_level_imports_go_down_the_layers(module):
    own = _layer(module)
    for node, in_function, targets in _imports(MODULES[module]):
        if in_function:
            continue
        for target in targets:
            if not target.startswith("mpigrad") or (module, target) in UPWARD_IMPORTS_ALLOWED:
                continue
            assert _layer(target) <= own, (
                f"{module} (layer {own}) imports {target} (layer {_layer(target)}) at line "
                f"{node.lineno}; see docs/architecture.md for which layer may import which")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_inside_functions_say_why(module):
    lines = MODULES[module].read_text().splitlines()
    for node, in_function, _ in _imports(MODULES[module]):
        if in_function:
            nearby = lines[node.lineno - 2:node.end_lineno]
            assert any("#" in line for line in nearby), (
                f"{module} line {node.lineno}: an import inside a function needs a comment "
                "saying why it cannot be at the top of the file")


def _imports_numpy(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "numpy"
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (
                node.module or "").split(".")[0] == "numpy":
            return True
    return False


def _within(module, packages):
    return any(module == p or module.startswith(p + ".") for p in packages)


NUMPY_USERS = sorted(m for m, path in MODULES.items() if _imports_numpy(path))


def test_numpy_outside_the_kernels_has_a_reason():
    unexplained = [m for m in NUMPY_USERS
                   if not _within(m, NUMPY_HOMES) and not _within(m, NUMPY_ALLOWED)]
    assert unexplained == [], (
        f"{unexplained} import numpy: array code goes into kernels/ (or an op in ops/); if "
        "it truly must stay, add the module to NUMPY_ALLOWED with the reason")


def test_numpy_allowances_are_still_needed():
    stale = [entry for entry in NUMPY_ALLOWED if not any(_within(m, [entry]) for m in NUMPY_USERS)]
    assert stale == [], f"{stale} no longer import numpy: remove them from NUMPY_ALLOWED"


def test_every_module_has_a_layer():
    assert [m for m in MODULES if _layer(m) is None] == []


def test_no_import_cycles():
    """No circle of top-level imports between modules (a package's face counts as a module);
    tensor.py's last line, the one allowed upward import, is left out."""
    edges = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for _, in_function, targets in _imports(path):
            for target in targets:
                if (not in_function and target in MODULES and target != module
                        and (module, target) not in UPWARD_IMPORTS_ALLOWED):
                    edges[module].add(target)
    # A package imports its own submodules to hand their names on; what a submodule takes
    # from its package's face is the circle this looks for.
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                cycle = stack[stack.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(MODULES):
        if module not in state:
            visit(module)


FIRST_IMPORTS = ["mpigrad.autograd.engine", "mpigrad.autograd.graph", "mpigrad.ops.core",
                 "mpigrad.tensor", "mpigrad.nn", "mpigrad.optim", "mpigrad.data",
                 "mpigrad.utils.checkpoint"]


@pytest.fixture(scope="module")
def first_imports():
    """A fresh interpreter importing each module first, all started at once: the imports
    share both cores, where one at a time they would leave one idle."""
    processes = {module: subprocess.Popen([sys.executable, "-c", f"import {module}"],
                                          stderr=subprocess.PIPE, text=True)
                 for module in FIRST_IMPORTS}
    yield processes
    for process in processes.values():
        process.kill()
        process.wait()


@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_any_module_can_be_imported_first(module, first_imports):
    _, err = first_imports[module].communicate(timeout=120)
    assert first_imports[module].returncode == 0, err
