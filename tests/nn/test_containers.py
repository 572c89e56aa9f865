"""Sequential, ModuleList, ModuleDict, Flatten, Unflatten, Identity."""
import collections

import pytest

import mpigrad as mg
from mpigrad import nn


def test_sequential_indexing_slicing_and_growth():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and seq[0] is a and seq[-1] is c
    assert list(seq) == [a, b, c]
    head = seq[:2]
    assert isinstance(head, nn.Sequential) and list(head) == [a, b]
    assert seq(mg.randn(4, 2)).shape == (4, 1)
    seq.append(nn.Tanh())
    assert len(seq) == 4 and isinstance(seq[3], nn.Tanh)
    del seq[1]
    assert [name for name, _ in seq.named_children()] == ["0", "1", "2"]
    seq[1] = nn.Linear(3, 2)
    assert seq[1].out_features == 2
    with pytest.raises(IndexError, match="index 3 is out of range for a Sequential of length 3"):
        seq[3]


def test_sequential_from_an_ordered_dict_keeps_the_names():
    seq = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert list(seq.state_dict()) == ["fc.weight", "fc.bias"]
    assert seq.fc is seq[0]
    assert list(seq[1:]._modules) == ["act"]


def test_module_list_registers_its_modules():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(list(layers.parameters())) == 6
    layers.insert(0, nn.Linear(2, 4))
    assert layers[0].out_features == 4 and len(layers) == 4
    del layers[1]
    assert [name for name, _ in layers.named_children()] == ["0", "1", "2"]
    layers += [nn.ReLU()]
    assert isinstance(layers[-1], nn.ReLU)
    assert isinstance(layers[1:], nn.ModuleList) and len(layers[1:]) == 3
    with pytest.raises(TypeError, match="indices must be integers or slices"):
        layers["0"]


def test_module_dict():
    heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Linear(2, 3)})
    assert list(heads) == ["a", "b"] and "b" in heads and len(heads) == 2
    heads["c"] = nn.Identity()
    assert list(heads.keys()) == ["a", "b", "c"]
    assert heads.pop("a").out_features == 1
    assert [n for n, _ in heads.named_parameters()] == ["b.weight", "b.bias"]


def test_flatten_unflatten_identity():
    x = mg.randn(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    assert nn.Unflatten(1, (6, 10))(nn.Flatten()(x)).shape == (2, 6, 10)
    assert nn.Identity(54, unused=True)(x) is x
