"""A oneDNN primitive called on mpigrad's plain (row-major, strided) arrays, and the
per-thread cache of them.

A primitive may choose layouts of its own for its arguments (the convolutions' blocked ones);
a call then reorders the plain arrays into buffers of those layouts and the result back.
Building a primitive takes milliseconds, so each is built once per key (geometry, thread
count) in each thread: the memory objects it holds are rebound to each call's arrays, and
two threads must not share them.
"""
import collections
import threading
import weakref

import numpy as np

from . import ARG_DST, ARG_SRC, INVALID_ARGUMENTS, UNIMPLEMENTED, OneDNNError

_ALIGNMENT = 64  # bytes: oneDNN's kernels load whole cache lines of its blocked layouts
_PRIMITIVES_PER_THREAD = 64


class PlainCall:
    """One primitive on plain arrays: its arguments' plain layouts (`plain_descs`, by
    argument: inputs and `outputs`), the layouts it chose, and the reorders between the two
    where they differ."""

    def __init__(self, dnnl, primitive_desc, plain_descs, outputs):
        self.dnnl, self.outputs = dnnl, frozenset(outputs)
        self.primitive = dnnl.primitive(primitive_desc)
        self.plain, self.chosen, self.reorders, self.sizes = {}, {}, {}, {}
        owned = [("dnnl_primitive_destroy", self.primitive)]
        for arg, plain_desc in plain_descs.items():
            self.plain[arg] = dnnl.memory(plain_desc)
            owned.append(("dnnl_memory_destroy", self.plain[arg]))
            chosen_desc = dnnl.chosen_desc(primitive_desc, arg)
            if dnnl.same_layout(plain_desc, chosen_desc):
                continue
            self.chosen[arg] = dnnl.memory(chosen_desc)
            self.sizes[arg] = dnnl.bytes(chosen_desc)
            self.reorders[arg] = (dnnl.reorder(plain_desc, chosen_desc)
                                  if arg not in self.outputs
                                  else dnnl.reorder(chosen_desc, plain_desc))
            owned += [("dnnl_memory_destroy", self.chosen[arg]),
                      ("dnnl_primitive_destroy", self.reorders[arg])]
        # the outputs written in a layout of the primitive's, reordered back after each call
        self.read_back = [arg for arg in self.outputs if arg in self.chosen]
        weakref.finalize(self, _destroy, dnnl, owned)

    def __call__(self, arrays):
        """Runs the primitive on `arrays`, by argument: the inputs, and the outputs it writes
        into."""
        dnnl, keep = self.dnnl, []
        args = {}
        for arg, array in arrays.items():
            dnnl.bind(self.plain[arg], array.ctypes.data)
            args[arg] = self.plain[arg]
            if arg in self.chosen:
                keep.append(_aligned_buffer(self.sizes[arg]))
                dnnl.bind(self.chosen[arg], keep[-1].ctypes.data)
                args[arg] = self.chosen[arg]
                if arg not in self.outputs:
                    dnnl.execute(self.reorders[arg], {ARG_SRC: self.plain[arg],
                                                      ARG_DST: self.chosen[arg]})
        dnnl.execute(self.primitive, args)
        for arg in self.read_back:
            dnnl.execute(self.reorders[arg], {ARG_SRC: self.chosen[arg],
                                              ARG_DST: self.plain[arg]})
        dnnl.wait()


def _destroy(dnnl, owned):
    for name, handle in owned:
        getattr(dnnl.lib, name)(handle)


def _aligned_buffer(size):
    raw = np.empty(size + _ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    return raw[start:start + size]


_cache = threading.local()


def cached(key, build):
    """The PlainCall for `key`, built by `build()` on this thread's first use (None where
    oneDNN has no implementation for it, remembered too)."""
    calls = getattr(_cache, "calls", None)
    if calls is None:
        calls = _cache.calls = collections.OrderedDict()
    if key in calls:
        calls.move_to_end(key)
        return calls[key]
    try:
        call = build()
    except OneDNNError as error:
        if error.status not in (INVALID_ARGUMENTS, UNIMPLEMENTED):
            raise
        call = None
    calls[key] = call
    if len(calls) > _PRIMITIVES_PER_THREAD:
        calls.popitem(last=False)
    return call
