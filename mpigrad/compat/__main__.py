"""`python -m mpigrad.compat script.py ARGS`: run a PyTorch script, unchanged, on mpigrad.

The script runs as `__main__` with `sys.argv` = [script.py, ARGS...] and its directory first
on `sys.path`, as `python script.py ARGS` would run it; launch it the same way under mpiexec
or srun (`mpiexec -n 4 python -m mpigrad.compat train.py`)."""
import os
import runpy
import sys

from . import install


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"mpigrad.compat: no such script: {script}", file=sys.stderr)
        return 2
    install()
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
