"""The main module of a process a compat script starts with the `spawn` method (mp.spawn,
DataLoader workers under spawn): multiprocessing re-imports the parent's main module in the
child by name, and the parent's names this module, so the child installs the alias before
the script's `import torch` runs again (as `__mp_main__`, so its `if __name__ == "__main__":`
part does not)."""
import os
import runpy

from . import SCRIPT_VARIABLE, install

install()
globals().update(runpy.run_path(os.environ[SCRIPT_VARIABLE], run_name="__mp_main__"))
