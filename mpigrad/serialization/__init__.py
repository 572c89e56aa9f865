"""Saving and loading: `save(obj, f)` and `load(f)`, the roles of torch.save/torch.load.

The format follows the target:

- a path ending in `.safetensors`: a flat state dict in the format PyTorch's ecosystem
  exchanges weights in (safetensors.py);
- a file object, or a path with one of torch's checkpoint suffixes (`.pt`, `.pth`, `.tar`,
  `.bin`, `.ckpt`, `.pkl`): torch.save's own zip-and-pickle format (pickled.py), which torch
  reads and writes, and which holds anything picklable (whole modules, plain objects, numpy
  arrays);
- any other path: mpigrad's own checkpoint (checkpoint.py), pickle-free, which holds whole
  training states and is what jobs/ write. It and safetensors never run code on load, and any
  damaged, cut-short or hostile file is one `ValueError` naming it.

`load` tells the formats apart by their contents. Reading torch's format is unpickling:
`weights_only=True`, the default as in torch 2.6 and later, resolves only an allow-list of
names (tensors, state dicts, plain containers and numbers; see pickled.py and the "Files"
section of docs/security.md); `weights_only=False` is the opt-in for trusted files. Every
write to a path is atomic (atomic.py).
"""
import os

from ..device import require_cpu
from . import checkpoint, pickled, safetensors
from .atomic import remove_stale_temporaries, write_atomically
from .pickled import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals

__all__ = ["save", "load", "remove_stale_temporaries", "safetensors_metadata",
           "add_safe_globals", "clear_safe_globals", "get_safe_globals", "safe_globals"]

# Names torch users give torch.save's files: a path ending so is written in torch's format.
TORCH_SUFFIXES = (".pt", ".pth", ".tar", ".bin", ".ckpt", ".pkl")


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False, *, metadata=None):
    """Write `obj` to `f` (a path, written atomically, or a binary file object).

    In torch's format (a file object, or a path with one of `TORCH_SUFFIXES`), `obj` is
    anything picklable, as for torch.save; tensors are stored under torch's names, so torch
    loads the file. `pickle_module` and `pickle_protocol` other than torch's defaults are
    refused, since the file would no longer be torch's.

    For a checkpoint, `obj` is any nesting of dicts (str or int keys), lists and tuples whose
    leaves are Tensors, numpy arrays and scalars, Python numbers, strings, bools and None:
    model and optimizer state dicts, scheduler states, epoch counters. A Tensor or array that
    appears several times is stored once and comes back as one shared object.

    For a `.safetensors` path, `obj` maps names to Tensors (a state dict; a tensor shared by
    two names, as tied weights are, is written under each) and `metadata`, a dict of strings,
    goes into the file's header (read back by `safetensors_metadata`).

    Stale temporaries of writers that died in the same directory are removed first.
    """
    if pickle_module is not None or pickle_protocol != 2 or not _use_new_zipfile_serialization:
        raise ValueError("mpigrad.save writes torch's default format only: pickle_module, "
                         "pickle_protocol and _use_new_zipfile_serialization keep their "
                         "defaults")
    if hasattr(f, "write"):
        if metadata is not None:
            raise TypeError("metadata is stored only in .safetensors files")
        pickled.write(obj, f)
        return
    path = f
    if _is_safetensors(path):
        encoded, writer = safetensors.encode(obj, metadata), safetensors
    elif metadata is not None:
        raise TypeError("metadata is stored only in .safetensors files")
    elif os.fspath(path).endswith(TORCH_SUFFIXES):
        write_atomically(path, lambda file: pickled.write(obj, file))
        return
    else:
        encoded, writer = _encode_checkpoint(obj, path), checkpoint
    write_atomically(path, lambda file: writer.write(encoded, file))


def _encode_checkpoint(obj, path):
    try:
        return checkpoint.encode(obj)
    except TypeError as error:
        raise TypeError(f"{error} ({os.fspath(path)!r} is written as mpigrad's pickle-free "
                        "checkpoint; to pickle any object as torch.save does, save to a path "
                        "ending in .pt or .pth, or to a file object)") from None


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """Read a file written by :func:`save`, by torch.save, or a `.safetensors` file; `f` is
    a path or a binary file object.

    Tensors come back as Tensors (dtype, shape and `requires_grad` kept). From mpigrad's
    checkpoint, numpy arrays come back as arrays, tuples as tuples, int dict keys as ints and
    every dict as a plain `dict`; a damaged or hostile checkpoint or safetensors file is a
    `ValueError` naming it.

    From torch's format, `weights_only` (default True, as torch's) limits what the file may
    hold to tensors and plain data (`pickle.UnpicklingError` otherwise, before anything it
    names is called); `weights_only=False` loads anything, running whatever code the file
    names: only for files trusted as code. Classes the file names under `torch.` resolve to
    mpigrad's namesakes.

    torch.load's other arguments keep their meaning: `map_location` ('cpu', a device, a
    dict of locations, or a function) can only send tensors to the CPU, where they already
    are, so a function is not called and any other device is an error; `mmap` is accepted
    and the arrays are read into memory.
    """
    _check_map_location(map_location)
    if pickle_load_args.keys() - {"encoding"}:
        raise TypeError(f"load() got an unexpected keyword argument "
                        f"{sorted(pickle_load_args.keys() - {'encoding'})[0]!r}")
    if hasattr(f, "read"):
        return _load_open(f, "the file object", pickle_module, weights_only)
    with open(f, "rb") as file:
        if _is_safetensors(f):
            _refuse_pickle_module(pickle_module)
            return _reading(f, "safetensors file", lambda: safetensors.read(file))
        return _load_open(file, os.fspath(f), pickle_module, weights_only)


def _load_open(file, name, pickle_module, weights_only):
    if pickled.is_torch_archive(file):
        if weights_only is None:
            # torch: naming a pickle module means trusting the file.
            weights_only = pickle_module is None
        elif weights_only and pickle_module is not None:
            raise RuntimeError("Can not safely load weights when explicit pickle_module is "
                               "specified")
        return pickled.read(file, weights_only=bool(weights_only))
    _refuse_pickle_module(pickle_module)
    return _reading(name, "mpigrad checkpoint", lambda: checkpoint.read(file))


def _refuse_pickle_module(pickle_module):
    if pickle_module is not None:
        raise TypeError("mpigrad.load never unpickles a checkpoint or safetensors file (they "
                        "are .npz with a JSON manifest, or safetensors), so pickle_module "
                        "cannot be used")


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
