"""default_collate and default_convert against torch's on the samples real programs give
them: numbers, bools, strings, bytes, numpy scalars and arrays, named tuples, nested and
ordered dicts, tuples; and their errors."""
import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as torch_data  # noqa: E402
from torch_twins import plain  # noqa: E402  (tests/data/conftest.py puts it on the path)

import mpigrad.utils.data as mpigrad_data  # noqa: E402

Point = collections.namedtuple("Point", "x y")

SAMPLES = {
    "ints": [1, 2, 3],
    "floats": [1.5, -2.0],
    "bools": [True, False],
    "strings": ["a", "bc"],
    "bytes": [b"a", b"bc"],
    "numpy strings": [np.str_("a"), np.str_("b")],
    "numpy float32": [np.float32(1.5), np.float32(2)],
    "numpy int8": [np.int8(1), np.int8(-2)],
    "numpy uint8": [np.uint8(1), np.uint8(200)],
    "numpy bool": [np.bool_(True), np.bool_(False)],
    "numpy arrays": [np.arange(6, dtype=np.int16).reshape(2, 3), np.ones((2, 3), np.int16)],
    "numpy 0-d arrays": [np.array(1.5), np.array(2.5)],
    "named tuples": [Point(1, np.float64(2)), Point(3, np.float64(4))],
    "nested dicts": [{"a": {"b": 1, "c": [1.0, 2.0]}, "name": "x"},
                     {"a": {"b": 2, "c": [3.0, 4.0]}, "name": "y"}],
    "tuples": [(1, "a", b"x"), (2, "b", b"y")],
    "lists": [[1, np.float32(2)], [3, np.float32(4)]],
    "ordered dicts": [collections.OrderedDict(z=1, a=2.0), collections.OrderedDict(z=3, a=4.0)],
    "default dicts": [collections.defaultdict(int, k=1), collections.defaultdict(int, k=2)],
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_collate_equals_torchs(name):
    samples = SAMPLES[name]
    ours, theirs = mpigrad_data.default_collate(samples), torch_data.default_collate(samples)
    assert plain(ours) == plain(theirs)
    if isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_convert_equals_torchs(name):
    for sample in SAMPLES[name]:
        ours, theirs = mpigrad_data.default_convert(sample), torch_data.default_convert(sample)
        assert plain(ours) == plain(theirs)


def test_convert_leaves_string_and_object_arrays_as_torch_does():
    for array in (np.array(["a", "b"]), np.array([b"a"]), np.array([None, 1], dtype=object)):
        assert mpigrad_data.default_convert(array) is array
        assert torch_data.default_convert(array) is array


@pytest.mark.parametrize("samples, error", [
    ([[1, 2], [3]], RuntimeError),
    ([np.array(["a"]), np.array(["b"])], TypeError),
    ([object(), object()], TypeError),
    ([np.ones(2), np.ones(3)], RuntimeError),
])
def test_collate_errors_are_torchs(samples, error):
    with pytest.raises(error) as theirs:
        torch_data.default_collate(samples)
    with pytest.raises(error) as ours:
        mpigrad_data.default_collate(samples)
    if error is TypeError or "element in list" in str(theirs.value):
        assert str(ours.value) == str(theirs.value)
