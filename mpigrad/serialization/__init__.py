"""Saving and loading: `save(obj, path)` and `load(path)`, the roles of torch.save/torch.load.

The format follows the file name: `.safetensors` files hold a flat state dict in the format
PyTorch's ecosystem exchanges weights in (safetensors.py); any other name is mpigrad's own
checkpoint, which holds whole training states (checkpoint.py). Neither ever runs code on
load, and any damaged, cut-short or hostile file is one `ValueError` naming it. Every write
is atomic (atomic.py).
"""
import os

from ..device import require_cpu
from . import checkpoint, safetensors
from .atomic import remove_stale_temporaries, write_atomically

__all__ = ["save", "load", "remove_stale_temporaries", "safetensors_metadata"]


def save(obj, path, *, metadata=None):
    """Write `obj` to `path` atomically.

    For a checkpoint, `obj` is any nesting of dicts (str or int keys), lists and tuples whose
    leaves are Tensors, numpy arrays and scalars, Python numbers, strings, bools and None:
    model and optimizer state dicts, scheduler states, epoch counters. A Tensor or array that
    appears several times is stored once and comes back as one shared object.

    For a `.safetensors` path, `obj` maps names to Tensors (a state dict; a tensor shared by
    two names, as tied weights are, is written under each) and `metadata`, a dict of strings,
    goes into the file's header (read back by `safetensors_metadata`).

    Stale temporaries of writers that died in the same directory are removed first.
    """
    if _is_safetensors(path):
        encoded, writer = safetensors.encode(obj, metadata), safetensors
    elif metadata is not None:
        raise TypeError("metadata is stored only in .safetensors files")
    else:
        encoded, writer = checkpoint.encode(obj), checkpoint
    write_atomically(path, lambda file: writer.write(encoded, file))


def load(path, map_location=None, pickle_module=None, *, weights_only=None, mmap=None):
    """Read a file written by :func:`save` (or a `.safetensors` file from anywhere).

    Tensors come back as Tensors (dtype, shape and `requires_grad` kept),
    numpy arrays as arrays, tuples as tuples, int dict keys as ints; every
    dict comes back as a plain `dict`. Raises `ValueError` naming the file
    if it is not a checkpoint of that kind or is damaged in any way.

    torch.load's arguments are accepted with their meaning: `map_location`
    ('cpu', a device, a dict of locations, or a function) can only send
    tensors to the CPU, where they already are, so a function is not called
    and any other device is an error; `weights_only` is always honoured,
    as nothing is ever unpickled; `mmap` is accepted and the arrays are
    read into memory.
    """
    _check_map_location(map_location)
    if pickle_module is not None:
        raise TypeError("mpigrad.load never unpickles (checkpoints are .npz with a JSON "
                        "manifest), so pickle_module cannot be used")
    with open(path, "rb") as file:
        if _is_safetensors(path):
            return _reading(path, "safetensors file", lambda: safetensors.read(file, path))
        return _reading(path, "mpigrad checkpoint", lambda: checkpoint.read(file))


def safetensors_metadata(path):
    """The `__metadata__` strings stored in the `.safetensors` file at `path`."""
    with open(path, "rb") as file:
        return _reading(path, "safetensors file", lambda: safetensors.read_metadata(file))


def _reading(path, kind, read):
    try:
        return read()
    except checkpoint.READ_ERRORS as err:
        raise ValueError(f"{os.fspath(path)} is not a valid {kind} (damaged, cut short or "
                         f"another kind of file): {err}") from err


def _is_safetensors(path):
    return os.fspath(path).endswith(".safetensors")


def _check_map_location(map_location):
    if map_location is None or callable(map_location):
        return
    targets = map_location.values() if isinstance(map_location, dict) else [map_location]
    for target in targets:
        try:
            require_cpu("mpigrad.load(map_location=...)", target)
        except AssertionError as error:  # torch.load says RuntimeError for any device
            raise RuntimeError(str(error)) from None
