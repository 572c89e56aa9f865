"""Running a PyTorch program unchanged: `python -m mpigrad.compat script.py ARGS`.

`install()` puts a finder first on `sys.meta_path` that answers every import of `torch` or
`torch.X.Y` with mpigrad's module of the same path (`mpigrad`, `mpigrad.X.Y`): the same module
object, so `torch.nn is mpigrad.nn`. A torch module mpigrad does not have is a
ModuleNotFoundError naming it, and so is a name imported from, or read on, an aliased module
(`from torch import foo`, `torch.foo`): "torch.foo is not provided by mpigrad; see
docs/porting.md". Packages built on PyTorch's C++ core (torchvision, torchaudio, ...) are not
aliased, and importing one says so, rather than failing somewhere inside it.

Nothing here is imported by `import mpigrad`; it changes the interpreter only once installed.
"""
import builtins
import importlib
import importlib.abc
import importlib.util
import sys

ADVICE = "see docs/porting.md"
# The script's path, for the children it starts with the spawn method (see _spawned_main).
SCRIPT_VARIABLE = "MPIGRAD_COMPAT_SCRIPT"
# Built on PyTorch's C++ core, so no alias can serve them.
THIRD_PARTY = ("torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "functorch")


def _not_provided(torch_name):
    return f"{torch_name} is not provided by mpigrad; {ADVICE}"


def _is_torch(name):
    return name == "torch" or name.startswith("torch.")


def _torch_name(module_name, attribute=None):
    base = "torch" + module_name[len("mpigrad"):]
    return base if attribute is None else f"{base}.{attribute}"


class _Alias(importlib.abc.Loader):
    """Serves an already imported mpigrad module under its torch name."""

    def __init__(self, module):
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        # The import system has just set the torch-named spec on it; mpigrad's own imports
        # (relative ones, pickling by module name) need its own back.
        module.__spec__ = self.spec


class TorchFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in THIRD_PARTY:
            raise ModuleNotFoundError(
                f"{fullname} is built on PyTorch's C++ core and is not aliased by "
                f"mpigrad.compat; {ADVICE}", name=fullname)
        if not _is_torch(fullname):
            return None
        target_name = "mpigrad" + fullname[len("torch"):]
        try:
            module = importlib.import_module(target_name)
        except ModuleNotFoundError as error:
            if error.name is not None and target_name.startswith(error.name):
                raise ModuleNotFoundError(_not_provided(fullname), name=fullname) from None
            raise
        _explain_missing_attributes(module)
        return importlib.util.spec_from_loader(fullname, _Alias(module),
                                               is_package=hasattr(module, "__path__"))


def _explain_missing_attributes(module):
    """A missing name read on an aliased module names its torch path (compat mode only)."""
    current = module.__dict__.get("__getattr__")
    if getattr(current, "_mpigrad_compat", False):
        return

    def __getattr__(name):
        if current is not None:
            try:
                return current(name)
            except AttributeError:
                pass
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(_not_provided(_torch_name(module.__name__, name)))
    __getattr__._mpigrad_compat = True
    module.__getattr__ = __getattr__


_original_import = builtins.__import__


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    module = _original_import(name, globals, locals, fromlist, level)
    if level == 0 and fromlist and _is_torch(name):
        for attribute in fromlist:
            if attribute != "*" and not hasattr(module, attribute):
                # Python would say "cannot import name 'foo' from 'mpigrad'"; name torch's.
                raise ImportError(_not_provided(f"{name}.{attribute}"), name=name)
    return module


def install():
    """Alias torch to mpigrad in this interpreter. A torch already imported is an error: its
    modules would be mixed with mpigrad's."""
    if any(isinstance(f, TorchFinder) for f in sys.meta_path):
        return
    loaded = sorted(n for n in sys.modules if _is_torch(n))
    if loaded:
        raise RuntimeError(f"mpigrad.compat: PyTorch is already imported ({loaded[0]}); "
                           "install the alias before anything imports torch")
    sys.meta_path.insert(0, TorchFinder())
    builtins.__import__ = _import
