"""The message format on its own (no agent, no MPI): every value the fast form carries comes
back equal and of the same type, everything else falls back to pickle, and tensors keep
dtype, shape, requires_grad and identity either way, and their strides where the memory
their view spans is sent (at most twice their own, no broadcast or reversed axis)."""
import collections
import copy
import fractions
import math
import operator

import numpy as np
import pytest

import mpigrad as mg
from mpigrad.distributed.rpc import wire

from . import _remote


class FakeRRef(wire._RRefBase):
    """Counts its forks: the fork protocol must run once per RRef object per message."""
    __slots__ = ("forks", "name")

    def __init__(self, name):
        self.forks, self.name = 0, name


def fork(rref):
    rref.forks += 1
    return ("described", rref.name)


def round_trip(payload, inline=True):
    """`payload` through dumps, header, the bytes, parse and loads; also returns the form."""
    body, arrays, layouts, _ = wire.dumps(payload, fork, False)
    if inline:
        received = bytearray(wire.header("call", 7, 0, layouts, None, body, arrays))
    else:
        received = bytearray(wire.header("call", 7, 9, layouts, None, body))
    kind, msg_id, tag, autograd, body_back, arrays_back, buffers = wire.parse(received)
    assert (kind, msg_id, tag, autograd) == ("call", 7, 0 if inline else 9, None)
    if inline:
        assert buffers == []
    else:
        assert len(buffers) == len(arrays)
        for buffer, sent in zip(buffers, arrays):
            buffer[...] = sent  # what MPI would receive
    return wire.loads(body_back, arrays_back, None, lambda d: ("loaded", d)), body[0]


def assert_same(back, value):
    """Equal, and of the same type all the way down (a tuple stays a tuple, True a bool)."""
    assert type(back) is type(value), (back, value)
    if isinstance(value, (tuple, list)):
        assert len(back) == len(value)
        for b, v in zip(back, value):
            assert_same(b, v)
    elif isinstance(value, dict):
        assert list(back) == list(value)
        for key in value:
            assert type(next(k for k in back if k == key)) is type(key)
            assert_same(back[key], value[key])
    elif isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    else:
        assert back == value


FAST_VALUES = [
    None, True, False, 0, -5, 2**70, 1.5, -0.0, float("inf"), float("nan"), 2 - 3j, "",
    "ünïcode", b"\x00\xff", (), (1,), [], {}, [1, [2.0, ("x", None)]],
    {"a": 1, 2: "b", None: [], 1.5: (), True: False, b"k": {"nested": [1, 2]}},
    wire.WorkerInfo("worker1", 1), len, operator.add, math.sqrt, int, ValueError,
    collections.OrderedDict, _remote.add, mg.add, mg.nn.functional.relu,
]


def name(value):
    """A test id that is the same in every process (no addresses)."""
    return getattr(value, "__qualname__", None) or repr(value)[:40]


@pytest.mark.parametrize("value", FAST_VALUES, ids=name)
def test_every_fast_path_type_round_trips_without_pickle(value):
    fresh = copy.deepcopy if isinstance(value, (list, dict)) else lambda v: v
    payload = (value, [fresh(value)], {"v": fresh(value)})
    back, form = round_trip(payload)
    assert form == wire.FAST
    assert_same(back, payload)


def test_a_call_with_tensors_is_fast():
    t = mg.arange(4, dtype=mg.float32)
    back, form = round_trip((_remote.add, (t, 2), {"scale": 3}))
    assert form == wire.FAST
    func, (tensor, two), kwargs = back
    assert func is _remote.add and two == 2 and kwargs == {"scale": 3}
    np.testing.assert_array_equal(tensor._array, t._array)


PICKLED_VALUES = [
    {1, 2}, frozenset({3}), np.float64(2.5), np.int32(7), fractions.Fraction(1, 3),
    range(3), collections.OrderedDict(a=1), (Ellipsis, "tensor", 0), ["x"] * 300,
    {(1, 2): "tuple key"}, slice(1, 5), collections.Counter("abca"),
]


@pytest.mark.parametrize("value", PICKLED_VALUES, ids=name)
def test_other_values_fall_back_to_pickle(value):
    back, form = round_trip((value, mg.ones(2)))
    assert form == wire.PICKLED
    assert type(back[0]) is type(value) and back[0] == value
    np.testing.assert_array_equal(back[1]._array, np.ones(2))  # the tensor still travels raw


def test_shared_and_recursive_containers_keep_their_identity():
    shared = [1, 2]
    (a, b), form = round_trip((shared, shared))
    assert form == wire.PICKLED and a is b and a == shared
    loop = [0]
    loop.append(loop)
    back, form = round_trip(loop)
    assert form == wire.PICKLED and back[1] is back


def test_what_cannot_travel_says_so():
    with pytest.raises(TypeError, match="cannot send this over RPC"):
        wire.dumps((lambda: 0, (), {}), fork, False)


def views(dtype=np.float64):
    base = np.arange(60).astype(dtype).reshape(3, 4, 5)
    return {
        "contiguous": base,
        "transposed": base.T,
        "permuted": base.transpose(1, 0, 2),
        "sliced": base[:, ::2, 1:],
        "expanded": np.broadcast_to(base[0, 0], (3, 5)),
        "0-d": base[1, 2, 3, ...],
        "empty": base[:, :0, ::2],
        "column": base[:, 1, :].T,
        "size-1 axis": base.T[:, None],
    }


# Views sent as the memory they span, so they keep their strides; the others (spans of more
# than twice their bytes, zero strides) arrive as C-contiguous copies.
SPANNED = {"contiguous", "transposed", "permuted", "0-d", "empty", "size-1 axis"}


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "separate"])
@pytest.mark.parametrize("form", ["fast", "pickled"])
@pytest.mark.parametrize("name", list(views()))
def test_tensors_keep_dtype_shape_strides_and_requires_grad(name, form, inline):
    for dtype in (np.float64, np.float32, np.float16, np.int64, np.uint8, np.bool_,
                  np.complex128):
        view = views(dtype)[name]
        tensor = mg.Tensor.wrap(view).requires_grad_(dtype in (np.float64, np.float32))
        extra = {1, 2} if form == "pickled" else None  # a set sends the payload by pickle
        (back_tensor, back_array, same, _), used = round_trip(
            (tensor, view, tensor, extra), inline)
        assert used == (wire.PICKLED if form == "pickled" else wire.FAST)
        assert back_tensor is same  # one tensor twice in a message stays one tensor
        for back in (back_tensor._array, back_array):
            assert back.dtype == view.dtype and back.shape == view.shape
            if name in SPANNED:
                assert back.strides == view.strides, (name, dtype)
            else:
                assert back.flags.c_contiguous, (name, dtype)
            np.testing.assert_array_equal(back, view)
        assert back_tensor.requires_grad == tensor.requires_grad
        assert type(back_array) is np.ndarray


def test_negative_strides_arrive_as_a_contiguous_copy():
    flipped = np.arange(12.0).reshape(3, 4)[::-1, ::2]
    back, _ = round_trip(mg.Tensor.wrap(flipped))
    np.testing.assert_array_equal(back._array, flipped)
    assert back._array.flags.c_contiguous


def wire_bytes(payload, inline):
    """How many bytes `payload`'s message puts on the wire: its header, and its arrays when
    they travel apart."""
    body, arrays, layouts, _ = wire.dumps(payload, fork, False)
    if inline:
        return len(wire.header("call", 7, 0, layouts, None, body, arrays))
    return len(wire.header("call", 7, 9, layouts, None, body)) + sum(a.nbytes for a in arrays)


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "separate"])
def test_a_column_of_a_large_matrix_sends_the_column_not_the_matrix(inline):
    matrix = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)
    column = matrix[:, 3]
    assert wire_bytes(mg.Tensor.wrap(column), inline) < column.nbytes + 512
    back, _ = round_trip(mg.Tensor.wrap(column), inline)
    np.testing.assert_array_equal(back._array, column)
    assert back._array.flags.c_contiguous and back._array.flags.writeable
    back._array[0] = -1.0
    assert matrix[0, 3] == 3.0
    # Within twice its bytes the span goes as is, strides kept: every other column.
    every_other = matrix[:8, ::2]
    assert wire_bytes(mg.Tensor.wrap(every_other), inline) < 2 * every_other.nbytes + 512
    assert round_trip(mg.Tensor.wrap(every_other), inline)[0]._array.strides == \
        every_other.strides


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "separate"])
@pytest.mark.parametrize("as_tensor", [True, False], ids=["tensor", "ndarray"])
def test_a_broadcast_view_arrives_as_independent_writeable_elements(as_tensor, inline):
    row = np.arange(4.0)
    view = np.broadcast_to(row, (1000, 4))
    sent = mg.Tensor.wrap(view).expand(1000, 4) if as_tensor else view
    assert wire_bytes(sent, inline) >= view.size * view.itemsize  # a copy of every element
    back, _ = round_trip(sent, inline)
    array = back._array if as_tensor else back
    np.testing.assert_array_equal(array, view)
    assert array.shape == (1000, 4) and array.flags.c_contiguous and array.flags.writeable
    array[0, 0] = -1.0
    assert array[1, 0] == 0.0 and row[0] == 0.0  # no element aliases another, nor the sender


def test_received_tensors_are_writable_and_independent():
    a, b = mg.ones(3), mg.zeros(2)
    back_a, back_b = round_trip((a, b))[0]
    back_a._array += 1
    np.testing.assert_array_equal(back_a._array, [2, 2, 2])
    np.testing.assert_array_equal(back_b._array, [0, 0])
    np.testing.assert_array_equal(a._array, [1, 1, 1])


@pytest.mark.parametrize("pickled", [False, True])
def test_rrefs_are_forked_once_per_object_and_only_after_encoding_succeeds(pickled):
    rref, other = FakeRRef("a"), FakeRRef("b")
    payload = [rref, (rref, other)] + ([{1}] if pickled else [])
    back, form = round_trip(payload)
    assert form == (wire.PICKLED if pickled else wire.FAST)
    assert (rref.forks, other.forks) == (1, 1)
    assert back[0] == ("loaded", ("described", "a")) and back[0] is back[1][0]
    assert back[1][1] == ("loaded", ("described", "b"))


def test_a_message_over_the_size_limit_is_refused_before_any_rref_is_forked(monkeypatch):
    monkeypatch.setattr(wire, "MAX_MESSAGE_BYTES", 1000)
    rref = FakeRRef("a")
    for payload in ((rref, np.zeros(126)), (rref, np.zeros(126), {1})):  # fast, pickled
        with pytest.raises(ValueError, match="would carry 1008 bytes.*at most 1000"):
            wire.dumps(payload, fork, False)
    assert rref.forks == 0
    wire.dumps((rref, np.zeros(125)), fork, False)
    assert rref.forks == 1


def test_a_body_reusing_a_value_at_every_level_is_refused_before_it_is_walked():
    """marshal stores a value used at several places once: a header of under 200 bytes
    reusing one tuple at each of 20 levels stood for 2**20 values, which took 3-6 s and
    112 MiB to decode. The bound is the encoder's own: its largest fast payloads still pass."""
    tree = (1,)
    for _ in range(20):
        tree = (tree, tree)
    received = bytearray(wire.header("call", 7, 0, [], None, (wire.FAST, tree, ())))
    assert len(received) < 200
    with pytest.raises(ValueError, match="more than 256 values"):
        wire.parse(received)
    for largest, smallest_pickled in (
            (tuple(range(255)), tuple(range(256))),
            ({i: [i, (i,)] for i in range(63)}, {i: [i, (i,)] for i in range(64)})):
        assert round_trip(largest) == (largest, wire.FAST)
        assert round_trip(smallest_pickled) == (smallest_pickled, wire.PICKLED)
