"""OptimizedModule: what torch.compile wraps a module in. mpigrad compiles nothing (its ops run
as they are), but keeps torch's wrapper so that code written for a compiled model works: the
wrapped module is `_orig_mod`, state_dict keys carry torch's `_orig_mod.` prefix, and
attributes read and written on the wrapper reach the wrapped module, as in torch."""
from ..nn.module import Module


class OptimizedModule(Module):
    # Set on the wrapper itself; every other attribute lives on the wrapped module.
    _own_attributes = frozenset({"_orig_mod", "compile_options"})

    def __init__(self, mod, compile_options=None):
        super().__init__()
        self._orig_mod = mod
        self.compile_options = compile_options or {}

    def forward(self, *args, **kwargs):
        return self._orig_mod(*args, **kwargs)

    @property
    def training(self):
        return self._orig_mod.training

    @training.setter
    def training(self, value):
        # Module.__init__ sets it before there is a wrapped module to hold it.
        if "_orig_mod" in self.__dict__.get("_modules", ()):
            self._orig_mod.training = value

    def __getattr__(self, name):
        modules = self.__dict__.get("_modules")
        if modules is None or "_orig_mod" not in modules:
            raise AttributeError(f"'OptimizedModule' object has no attribute '{name}'")
        if name == "_orig_mod":
            return modules["_orig_mod"]
        return getattr(modules["_orig_mod"], name)

    def __setattr__(self, name, value):
        if (name in self._own_attributes or hasattr(type(self), name)
                or "_orig_mod" not in self.__dict__.get("_modules", ())):
            return super().__setattr__(name, value)
        return setattr(self._orig_mod, name, value)
