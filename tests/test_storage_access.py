"""mpigrad's own code reads a tensor's storage as `t._array`, never as `t.data`.

`Tensor.data` is torch's public attribute: a new untracked Tensor on the same storage (see
tensor.py). Inside mpigrad it would hand a Tensor to code that expects an ndarray, and work
by accident or not at all, so every `<expr>.data` in mpigrad/ must be one of the reviewed
non-tensor uses below.
"""
import ast
import pathlib

import mpigrad

ROOT = pathlib.Path(mpigrad.__file__).parent

# Receivers whose `.data` is not a tensor's storage: the package paths mpigrad.data and
# utils.data, and ndarray.ctypes.data (an address).
MODULES_AND_ADDRESSES = {"mpigrad", "utils", "ctypes"}
# (file, receiver) pairs reviewed by hand, each with what its `.data` is.
NOT_TENSORS = {
    ("data/partition.py", "self"): "the dataset a Partitioner splits",
    ("nn/utils/rnn.py", "self"): "PackedSequence's data field (a Tensor, the sequence's own)",
    ("distributed/fsdp/_comm.py", "self"): "the MPI communicator for parameter traffic",
    ("distributed/pipelining/messages.py", "self"): "a receiver's per-microbatch slots",
    ("kernels/compiled/_threads.py", "whole"): "a numba array's data pointer, in LLVM IR",
    ("kernels/compiled/_blas.py", "array"): "a numba array's data pointer, in LLVM IR",
}


def _receiver(node):
    value = node.value
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute):
        return value.attr
    return ast.unparse(value)


def test_no_tensor_storage_is_read_through_data():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr == "data"):
                continue
            receiver = _receiver(node)
            if receiver in MODULES_AND_ADDRESSES or (relative, receiver) in NOT_TENSORS:
                continue
            offenders.append(f"mpigrad/{relative}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, (
        "mpigrad's own code reads a tensor's storage as `t._array` (t.data is torch's public, "
        "untracked Tensor); if one of these is not a Tensor, add it to NOT_TENSORS saying "
        "what it is:\n" + "\n".join(offenders))
