"""`python -m mpigrad.compat script.py ARGS`: run a PyTorch script, unchanged, on mpigrad.

The script runs as `__main__` with `sys.argv` = [script.py, ARGS...] and its directory first
on `sys.path`, as `python script.py ARGS` would run it; launch it the same way under mpiexec
or srun (`mpiexec -n 4 python -m mpigrad.compat train.py`)."""
import builtins
import importlib.machinery
import os
import sys
import types

from . import SCRIPT_VARIABLE, install


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"mpigrad.compat: no such script: {script}", file=sys.stderr)
        return 2
    install()
    script = os.path.abspath(script)
    os.environ[SCRIPT_VARIABLE] = script
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(script))
    _run_as_main(script)
    return 0


def _run_as_main(script):
    """Run `script` as `__main__` (as runpy.run_path would), with the module's spec naming
    _spawned_main: multiprocessing's spawn re-imports a main module by its spec's name, so
    the children import the script through the alias too."""
    with open(script, "rb") as source:
        code = compile(source.read(), script, "exec")
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__spec__ = importlib.machinery.ModuleSpec("mpigrad.compat._spawned_main", None)
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
