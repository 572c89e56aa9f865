"""A backend: its kernel tables, and which backend is in use."""
class Backend:
    """One array library's kernels, by op name."""

    def __init__(self, name):
        self.name = name
        self.forwards = {}
        self.backwards = {}
        self.inplace = {}
        self.scatters = {}

    def register(self, op_name, forward=None, backward=None, inplace=None, scatter=None):
        for table, kernel in ((self.forwards, forward), (self.backwards, backward),
                              (self.inplace, inplace), (self.scatters, scatter)):
            if kernel is None:
                continue
            if op_name in table and table[op_name] is not kernel:
                raise ValueError(f"backend {self.name}: op {op_name!r} already has a kernel "
                                 "of this kind; one runtime path per op")
            table[op_name] = kernel

    def missing(self, op_names):
        """The ops this backend cannot run forward: what a new backend still has to fill."""
        return sorted(name for name in op_names if name not in self.forwards)

    def __repr__(self):
        return (f"<backend {self.name}: {len(self.forwards)} forwards, "
                f"{len(self.backwards)} fused backwards>")


NUMPY = Backend("numpy")


class selected:
    """The backend every op dispatches to, read on each call (`selected.backend`)."""
    backend = NUMPY


def current():
    return selected.backend


def use(backend):
    """Make `backend` the one every op runs on; returns the previous one."""
    if not isinstance(backend, Backend):
        raise TypeError(f"use() takes a kernels.Backend, got {type(backend).__name__}")
    previous, selected.backend = selected.backend, backend
    return previous
