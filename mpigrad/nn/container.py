"""Containers: modules that hold other modules and register them for traversal."""
import collections
import numbers

from .. import _tensor_str, dtypes
from ..tensor import Tensor
from .module import Module, _indented, _repr_with_lines
from .parameter import Parameter


def _position(index, length, container):
    """A non-negative position for an int index, with Python's negative indexing."""
    if not isinstance(index, numbers.Integral):
        raise TypeError(f"{container} indices must be integers or slices, got "
                        f"{type(index).__name__}")
    if not -length <= index < length:
        raise IndexError(f"index {index} is out of range for a {container} of length {length}")
    return index % length


def _renumber(container, modules):
    container._modules.clear()
    for i, module in enumerate(modules):
        container.add_module(str(i), module)


class _ModuleSequence(Module):
    """What Sequential and ModuleList share: length, iteration, append, extend, insert."""

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        modules = list(self._modules.values())
        modules.insert(index, module)
        _renumber(self, modules)
        return self


class Sequential(_ModuleSequence):
    """Calls its modules in order, each on the previous one's output.

    Built from modules (named "0", "1", ...) or from an OrderedDict of name -> module.
    Indexing by int gives a module; by slice, a Sequential of those modules (names kept).
    """

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def forward(self, input):
        for module in self._modules.values():
            input = module(input)
        return input

    def _key(self, index):
        return list(self._modules)[_position(index, len(self._modules), "Sequential")]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(collections.OrderedDict(list(self._modules.items())[index]))
        return self._modules[self._key(index)]

    def __setitem__(self, index, module):
        self.add_module(self._key(index), module)

    def __delitem__(self, index):
        keys = list(self._modules)[index] if isinstance(index, slice) else [self._key(index)]
        for key in keys:
            del self._modules[key]
        # Renumber, as torch does, so a later append cannot reuse a surviving name.
        _renumber(self, list(self._modules.values()))


class ModuleList(_ModuleSequence):
    """A list of modules, registered as "0", "1", ... so their parameters are found."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(list(self._modules.values())[index])
        return self._modules[str(_position(index, len(self), "ModuleList"))]

    def __setitem__(self, index, module):
        self.add_module(str(_position(index, len(self), "ModuleList")), module)

    def __delitem__(self, index):
        modules = list(self._modules.values())
        if isinstance(index, slice):
            del modules[index]
        else:
            del modules[_position(index, len(modules), "ModuleList")]
        _renumber(self, modules)

    def __iadd__(self, modules):
        return self.extend(modules)

    def __repr__(self):
        """As torch's: a run of equal entries is one line, `(0-5): 6 x Block(...)`."""
        runs = []  # [first index, last index, repr]
        for index, module in enumerate(self._modules.values()):
            text = repr(module)
            if runs and runs[-1][2] == text:
                runs[-1][1] = index
            else:
                runs.append([index, index, text])
        lines = [_indented(f"({first}): {text}" if first == last
                           else f"({first}-{last}): {last - first + 1} x {text}")
                 for first, last, text in runs]
        return _repr_with_lines(self, [], lines)


class ModuleDict(Module):
    """An ordered dict of name -> module, registered under those names."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def pop(self, key):
        module = self._modules[key]
        del self._modules[key]
        return module

    def clear(self):
        self._modules.clear()

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for key, module in items:
            self[key] = module


def _put_parameter(container, name, value):
    """Registers value under name, keeping name's place if it exists (a dict assignment, as
    torch's containers do). A plain tensor is wrapped as a Parameter, as torch does; any other
    object is kept as an attribute."""
    if isinstance(value, Tensor):
        container.register_parameter(
            name, value if isinstance(value, Parameter) else Parameter(value))
    else:
        setattr(container, name, value)


class ParameterList(Module):
    """A list of parameters, registered as "0", "1", ... (plain tensors become Parameters)."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)([self[i] for i in range(len(self))[index]])
        return getattr(self, str(_position(index, len(self), "ParameterList")))

    def __setitem__(self, index, value):
        _put_parameter(self, str(_position(index, len(self), "ParameterList")), value)

    def append(self, value):
        self._size += 1
        self[-1] = value
        return self

    def extend(self, values):
        for value in values:
            self.append(value)
        return self

    def __iadd__(self, values):
        return self.extend(values)

    def extra_repr(self):
        return _listing(enumerate(self), _tensor_str.dtype_name)


class ParameterDict(Module):
    """An ordered dict of name -> parameter, registered under those names (plain tensors
    become Parameters)."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, value):
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys must be strings, got {type(key).__name__}")
        self._keys[key] = None
        _put_parameter(self, key, value)

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, key)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(list(self._keys))

    def __contains__(self, key):
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def values(self):
        return [self[k] for k in self._keys]

    def items(self):
        return [(k, self[k]) for k in self._keys]

    def get(self, key, default=None):
        return self[key] if key in self else default

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        key = next(reversed(self))
        return key, self.pop(key)

    def clear(self):
        for key in list(self._keys):
            del self[key]

    def copy(self):
        return type(self)(collections.OrderedDict(self.items()))

    def update(self, parameters):
        if isinstance(parameters, (collections.OrderedDict, ParameterDict)):
            items = parameters.items()
        elif hasattr(parameters, "items"):
            # torch sorts the keys of a plain mapping (its order once was not reliable).
            items = sorted(parameters.items())
        else:
            items = parameters
        for key, value in items:
            self[key] = value

    def extra_repr(self):
        return _listing(self.items(), dtypes.legacy_type_name)


def _listing(pairs, type_name):
    """torch's entry lines (`  (0): Parameter containing: [torch.float32 of size 2x3]`; the
    dict names the legacy type, torch.FloatTensor), which Module's repr indents once more."""
    return "\n".join(f"  ({key}): {_describe(value, type_name)}" for key, value in pairs)


def _describe(value, type_name):
    if not isinstance(value, Tensor):
        return f"Object of type: {type(value).__name__}"
    kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
    return (f"{kind} containing: [{type_name(value.dtype)} of size "
            f"{'x'.join(map(str, value.shape))}]")
