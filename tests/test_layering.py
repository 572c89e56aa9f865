"""The import layering that mpigrad/ARCHITECTURE.md describes, checked on the source.

A module's top-level imports may reach its own layer or a lower one; the one exception is the
last line of tensor.py, which brings in the layers that define Tensor's operators and
backward(). An import inside a function must say in a comment why it cannot be at the top.
"""
import ast
import pathlib
import subprocess
import sys

import pytest

import mpigrad

ROOT = pathlib.Path(mpigrad.__file__).parent

# Lowest first. A module not named here belongs to its package's entry.
LAYERS = [
    {"mpigrad.hooks", "mpigrad.dtypes", "mpigrad.random", "mpigrad.futures", "mpigrad.device",
     "mpigrad.autograd.grad_mode", "mpigrad.autograd.anomaly", "mpigrad.autograd.graph",
     "mpigrad.autograd.engine"},
    {"mpigrad.tensor"},
    {"mpigrad.ops", "mpigrad.autograd", "mpigrad.creation", "mpigrad.serialization"},
    {"mpigrad.nn", "mpigrad.optim", "mpigrad.data", "mpigrad.utils"},
    {"mpigrad.distributed", "mpigrad.nn.parallel", "mpigrad"},
]
UPWARD_IMPORTS_ALLOWED = {("mpigrad.tensor", "mpigrad.autograd"), ("mpigrad.tensor", "mpigrad.ops")}


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
                f"{node.lineno}; see mpigrad/ARCHITECTURE.md for which layer may import which")


# distributed/ is being reworked in its own branch; its function-level imports are listed there.
@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("mpigrad.distributed")))
def test_imports_inside_functions_say_why(module):
    lines = MODULES[module].read_text().splitlines()
    for node, in_function, _ in _imports(MODULES[module]):
        if in_function:
            nearby = lines[node.lineno - 2:node.end_lineno]
            assert any("#" in line for line in nearby), (
                f"{module} line {node.lineno}: an import inside a function needs a comment "
                "saying why it cannot be at the top of the file")


@pytest.mark.parametrize("module", ["mpigrad.autograd.engine", "mpigrad.autograd.graph",
                                    "mpigrad.ops.core", "mpigrad.tensor", "mpigrad.nn",
                                    "mpigrad.optim", "mpigrad.data", "mpigrad.utils.checkpoint"])
def test_any_module_can_be_imported_first(module):
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, timeout=120)
