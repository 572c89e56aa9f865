"""torch.nn.utils.rnn: batches of sequences of different lengths, padded or packed.

A PackedSequence holds the steps of all sequences time-major, longest sequence first: the
`batch_sizes[t]` rows of step t are the sequences still running at t. Every conversion here
is one gather (a reshape or cat, then one index), so it adds a constant number of graph
nodes whatever the lengths, and gradients flow back through it as through any indexing.
"""
from collections import namedtuple

import numpy as np

from ...ops import cat, reshape
from ...tensor import Tensor


def _long(array):
    return Tensor.wrap(np.asarray(array, dtype=np.int64))


def _ints(values):
    return np.asarray(values.numpy() if isinstance(values, Tensor) else values, dtype=np.int64)


def invert_permutation(permutation):
    """The inverse of a 1-D permutation tensor (None for None)."""
    if permutation is None:
        return None
    return _long(np.argsort(_ints(permutation)))


class PackedSequence(namedtuple("PackedSequence_",
                                ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices) as torch's: `data` the steps of
    all sequences (longest first), `batch_sizes` an int64 tensor of rows per step,
    `sorted_indices` the original batch position of each sorted sequence (None when the batch
    was packed already sorted), `unsorted_indices` its inverse. Built by the functions below
    rather than by hand."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:  # PackedSequence((data, batch_sizes), ...)
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """The same sequences with `data` converted by Tensor.to (self if nothing changes)."""
        data = self.data.to(*args, **kwargs)
        return self if data is self.data else self._replace(data=data)

    def double(self):
        return self.to(dtype=np.float64)

    def float(self):
        return self.to(dtype=np.float32)

    def cpu(self):
        return self

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def _batch_sizes(lengths):
    """Rows per step of sequences of `lengths`, sorted longest first."""
    return (lengths[None, :] > np.arange(lengths[0])[:, None]).sum(1)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded (T, B, *) batch ((B, T, *) with batch_first) of sequences of `lengths`.
    With enforce_sorted the lengths must not increase; otherwise the batch is sorted here and
    the order kept in the result's sorted_indices."""
    lengths = _ints(lengths)
    batch = input.shape[0 if batch_first else 1]
    if lengths.ndim != 1 or len(lengths) != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{lengths.size} (batch_size={batch})")
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise RuntimeError(
                "`lengths` array must be sorted in decreasing order when `enforce_sorted` is "
                "True. You can pass `enforce_sorted=False` to pack_padded_sequence and/or "
                "pack_sequence to sidestep this requirement if you do not need ONNX "
                "exportability.")
        order, sorted_indices = np.arange(batch), None
    else:
        order = np.argsort(-lengths, kind="stable")
        sorted_indices = _long(order)
    lengths = lengths[order]
    if lengths[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    steps = input.shape[1 if batch_first else 0]
    if lengths[0] > steps:
        raise RuntimeError(f"pack_padded_sequence: a length of {lengths[0]} exceeds the "
                           f"input's {steps} steps")
    batch_sizes = _batch_sizes(lengths)
    # Row of (step t, sorted sequence b) in the input flattened over its first two dims.
    t = np.repeat(np.arange(len(batch_sizes)), batch_sizes)
    b = order[np.concatenate([np.arange(n) for n in batch_sizes])]
    rows = b * steps + t if batch_first else t * batch + b
    data = reshape(input, (steps * batch,) + tuple(input.shape[2:]))[rows]
    return PackedSequence(data, _long(batch_sizes), sorted_indices, None)


def _padding_row(like, value):
    return Tensor.wrap(np.full((1,) + tuple(like.shape[1:]), value, dtype=like.dtype))


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded batch, lengths), in the original batch
    order, padded with `padding_value` to the longest sequence or to `total_length` steps."""
    data, batch_sizes, _, unsorted_indices = sequence
    batch_sizes = _ints(batch_sizes)
    steps = len(batch_sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
        steps = total_length
    batch = int(batch_sizes[0])
    lengths = (batch_sizes[None, :] > np.arange(batch)[:, None]).sum(1)
    offsets = np.concatenate([[0], np.cumsum(batch_sizes)])
    sorted_position = np.arange(batch) if unsorted_indices is None else _ints(unsorted_indices)
    t = np.arange(steps)[:, None]
    b = sorted_position[None, :]
    inside = t < lengths[b]
    rows = np.where(inside, offsets[np.minimum(t, len(batch_sizes) - 1)] + b,
                    data.shape[0])  # past a sequence's end: the padding row
    if batch_first:
        rows = rows.T
    padded = cat([data, _padding_row(data, padding_value)], 0)[rows]
    return padded, _long(lengths[sorted_position])


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stacks sequences of shapes (L_i, *) into one (T, B, *) batch ((B, T, *) with
    batch_first), padded on the right (or left) with `padding_value`."""
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    try:
        sequences = tuple(sequences)
    except TypeError:
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg "
                           f"of type: {type(sequences)}") from None
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError("Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    trailing = {tuple(s.shape[1:]) for s in sequences}
    if len(trailing) > 1:
        raise RuntimeError(f"pad_sequence: the sequences' trailing dimensions differ: "
                           f"{sorted(trailing)}")
    lengths = np.array([s.shape[0] for s in sequences])
    steps = int(lengths.max())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    t = np.arange(steps)[:, None]
    first = 0 if padding_side == "right" else steps - lengths[None, :]
    inside = (t >= first) & (t < first + lengths[None, :])
    rows = np.where(inside, starts[None, :] + t - first, lengths.sum())
    if batch_first:
        rows = rows.T
    flat = cat(list(sequences) + [_padding_row(sequences[0], padding_value)], 0)
    return flat[rows]


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences of a padded batch, each cut to its length."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[i, :int(n)] for i, n in enumerate(_ints(lengths))]


def pack_sequence(sequences, enforce_sorted=True):
    """Packs a list of sequences of shapes (L_i, *)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences a PackedSequence holds, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
