"""Recurrent layers with torch.nn's names, parameter layout (so a torch state dict loads
unchanged), gate order, initialisation and errors: RNN, LSTM (with proj_size), GRU and their
cells.

A layer-direction is two graph nodes however long the sequence: one matmul projecting every
step's input (x W_ih^T + b_ih for the whole sequence), and one recurrence op (ops/recurrent.py)
that runs the time loop. An LSTM layer without a projection is one node, `lstm_layer`, which
runs on oneDNN's LSTM primitive where it can (float32, a padded batch), as torch's does.
Inputs are turned into packed rows first (a padded batch is packed rows of equal batch
sizes), so padded and packed sequences take the same path.
"""
import math
import numbers
import warnings

import numpy as np

from .. import creation, ops
from ..autograd import grad_mode
from ..ops.recurrent import final_rows
from . import functional as F, init
from ._checks import check_device
from .module import Module
from .parameter import Parameter
from .utils.rnn import PackedSequence

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_RECURRENCE = {"LSTM": ops.lstm, "GRU": ops.gru, "RNN_TANH": ops.rnn_tanh,
               "RNN_RELU": ops.rnn_relu}


def _check_type(name, value, kind):
    if not isinstance(value, kind):
        raise TypeError(f"{name} should be of type {kind.__name__}, got: "
                        f"{type(value).__name__}")


class RNNBase(Module):
    """What RNN, LSTM and GRU share: the stack of layers and directions, its parameters
    (`weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}`, `weight_hr_l{k}`,
    each with `_reverse` for the second direction) and the forward over padded, unbatched or
    packed input."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0, device=None,
                 dtype=None):
        super().__init__()
        check_device(device, type(self).__name__)
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                          "non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        _check_type("bias", bias, bool)
        _check_type("batch_first", batch_first, bool)
        _check_type("input_size", input_size, int)
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        _check_type("hidden_size", hidden_size, int)
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size or hidden_size
        self._all_weights = []
        for layer in range(num_layers):
            for suffix in ("", "_reverse")[:self._directions]:
                layer_input = input_size if layer == 0 else real_hidden * self._directions
                shapes = {"weight_ih": (gate_size, layer_input),
                          "weight_hh": (gate_size, real_hidden)}
                if bias:
                    shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
                if proj_size:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                names = []
                for kind, shape in shapes.items():
                    names.append(f"{kind}_l{layer}{suffix}")
                    setattr(self, names[-1], Parameter(creation.empty(*shape, dtype=dtype)))
                self._all_weights.append(names)
        self._flat_weights_names = [name for names in self._all_weights for name in names]
        self.reset_parameters()

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self):
        """A no-op, as torch's is off cuDNN: the weights are used where they are."""

    @property
    def all_weights(self):
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # --------------------------------------------------------------------- forward
    _lstm = False
    # torch words the input-dimension error a little differently per class
    _dim_error = "{name}: Expected input to be 2D or 3D, got {dim}D instead"

    def _hidden_shape(self, batch, cell=False):
        size = self.hidden_size if cell or not self.proj_size else self.proj_size
        return (self.num_layers * self._directions, batch, size)

    def forward(self, input, hx=None):
        states = None if hx is None else (list(hx) if self._lstm else [hx])
        if isinstance(input, PackedSequence):
            data, batch_sizes, sorted_indices, unsorted_indices = input
            batch_sizes = tuple(int(n) for n in np.asarray(batch_sizes.numpy()))
            if states is not None and sorted_indices is not None:
                states = [s.index_select(1, sorted_indices) for s in states]
            self._check_input(data, 2)
        else:
            if input.ndim not in (2, 3):
                raise ValueError(self._dim_error.format(name=type(self).__name__,
                                                        dim=input.ndim))
            batched = input.ndim == 3
            batch_dim = 0 if self.batch_first else 1
            if states is not None:
                self._check_state_dims(states, 3 if batched else 2)
            if not batched:
                input = input.unsqueeze(batch_dim)
                states = None if states is None else [s.unsqueeze(1) for s in states]
            self._check_input(input, 3)
            steps = input.transpose(0, 1) if self.batch_first else input
            if steps.shape[0] == 0:
                raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
            batch_sizes = (steps.shape[1],) * steps.shape[0]
            data = steps.reshape(-1, input.shape[-1])
        if states is None:
            states = [creation.zeros(*self._hidden_shape(batch_sizes[0], cell=i == 1),
                                     dtype=data.dtype) for i in range(1 + self._lstm)]
        self._check_states(states, batch_sizes[0], data.dtype)
        out, final = self._layers(data, batch_sizes, states)
        if isinstance(input, PackedSequence):
            if unsorted_indices is not None:
                final = [s.index_select(1, unsorted_indices) for s in final]
            output = PackedSequence(out, input.batch_sizes, sorted_indices, unsorted_indices)
        else:
            output = out.reshape(len(batch_sizes), batch_sizes[0], out.shape[-1])
            if self.batch_first:
                output = output.transpose(0, 1)
            if not batched:
                output = output.squeeze(batch_dim)
                final = [s.squeeze(1) for s in final]
        return output, (tuple(final) if self._lstm else final[0])

    def _check_input(self, input, dims):
        weight = self.weight_ih_l0
        if input.dtype != weight.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({weight.dtype}). Convert input: input.to({weight.dtype}), or "
                             f"convert model: model.to({input.dtype})")
        if input.ndim != dims:
            raise RuntimeError(f"input must have {dims} dimensions, got {input.ndim}")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def _check_state_dims(self, states, dims):
        if all(s.ndim == dims for s in states):
            return
        kind = "batched 3-D" if dims == 3 else "unbatched 2-D"
        if self._lstm:
            got = ", ".join(f"{s.ndim}-D" for s in states)
            raise RuntimeError(f"For {kind} input, hx and cx should also be {dims}-D but got "
                               f"({got}) tensors")
        raise RuntimeError(f"For {kind} input, hx should also be {dims}-D but got "
                           f"{states[0].ndim}-D tensor")

    def _check_states(self, states, batch, dtype):
        # torch multiplies h0 by W_hh as it is (a dtype error), and converts c0.
        if states[0].dtype != dtype:
            raise RuntimeError(f"hx must have the input's dtype ({dtype}), got "
                               f"{states[0].dtype}")
        for i, state in enumerate(states):
            expected = self._hidden_shape(batch, cell=i == 1)
            if tuple(state.shape) != expected:
                what = f"hidden[{i}] size" if self._lstm else "hidden size"
                raise RuntimeError(f"Expected {what} {expected}, got {list(state.shape)}")

    def _layers(self, x, batch_sizes, states):
        """The stack over packed rows x: the last layer's output rows and the final states,
        each (layers * directions, batch, size)."""
        recurrence = _RECURRENCE[self.mode]
        out_size = self.proj_size or self.hidden_size
        finals = [[] for _ in states]
        one_op = self._lstm and not self.proj_size  # each layer-direction as lstm_layer
        # torch's `train` of its LSTM layers: whether a graph will be recorded, which needs
        # the training forward's workspace; without one, oneDNN's inference forward runs
        recording = one_op and grad_mode.is_grad_enabled() and any(
            t.requires_grad for t in (x, *states, *self._flat_weights))
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self._directions):
                k = layer * self._directions + direction
                # "weight_ih_l0_reverse" -> "weight_ih"
                weights = {name.split("_l")[0]: getattr(self, name)
                           for name in self._all_weights[k]}
                initial = (states[0][k] if not self._lstm
                           else ops.cat([states[0][k], states[1][k]], 1))
                reverse = direction == 1
                last = final_rows(batch_sizes, reverse)
                if one_op:
                    # the whole layer, input projection included, as one op: each step's h,
                    # then each sequence's final c
                    rows = ops.lstm_layer(x, initial, weights["weight_ih"],
                                          weights["weight_hh"], weights.get("bias_ih"),
                                          weights.get("bias_hh"), batch_sizes=batch_sizes,
                                          reverse=reverse, train=recording)
                    outputs.append(rows[:x.shape[0]])
                    finals[0].append(outputs[-1][last])
                    finals[1].append(rows[x.shape[0]:])
                    continue
                projection = (weights["weight_hr"],) if self.proj_size else ()
                rows = recurrence(F.linear(x, weights["weight_ih"], weights.get("bias_ih")),
                                  initial, weights["weight_hh"], weights.get("bias_hh"),
                                  *projection, batch_sizes=batch_sizes, reverse=reverse)
                # Each row is the step's output h (then, for the LSTM, c; for gated cells, what
                # backward reads). h and c are sliced from the final rows alone, so backward
                # fills one array of the whole sequence's size for them, not one each.
                final = rows[last]
                saved = rows.shape[1] > out_size
                outputs.append(rows[:, :out_size] if saved else rows)
                finals[0].append(final[:, :out_size] if saved else final)
                if self._lstm:
                    finals[1].append(final[:, out_size:out_size + self.hidden_size])
            x = outputs[0] if len(outputs) == 1 else ops.cat(outputs, 1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, [ops.stack(f) for f in finals]


class RNN(RNNBase):
    """Elman RNN, h_t = tanh (or relu)(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), per layer."""

    _dim_error = "{name}: Expected input to be 2D or 3D, got {dim}D tensor instead"

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.__dict__["nonlinearity"] = args[3]
            args = args[:3] + args[4:]
        else:
            self.__dict__["nonlinearity"] = kwargs.pop("nonlinearity", "tanh")
        modes = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
        if self.nonlinearity not in modes:
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' "
                             "or 'relu'.")
        super().__init__(modes[self.nonlinearity], *args, **kwargs)


class LSTM(RNNBase):
    """Long short-term memory, gates i, f, g, o in that order in each weight's rows; with
    proj_size > 0 the hidden state is projected by weight_hr (h_t = W_hr (o * tanh(c_t)))."""

    _lstm = True

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit, gates r, z, n in that order, with torch's
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn))."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


# ----------------------------------------------------------------------------- cells
class RNNCellBase(Module):
    """One step: weight_ih (gates * hidden, input), weight_hh (gates * hidden, hidden) and the
    two biases, initialised U(-1/sqrt(hidden), 1/sqrt(hidden)) as torch's."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        check_device(device, type(self).__name__)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(creation.empty(num_chunks * hidden_size, input_size,
                                                  dtype=dtype))
        self.weight_hh = Parameter(creation.empty(num_chunks * hidden_size, hidden_size,
                                                  dtype=dtype))
        for name in ("bias_ih", "bias_hh"):
            self.register_parameter(name, Parameter(creation.empty(num_chunks * hidden_size,
                                                                   dtype=dtype))
                                    if bias else None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _step(self, cell, input, states):
        """`cell` on input and states (None: zeros), each 1-D (unbatched) or 2-D."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if states is not None:
            for i, state in enumerate(states):
                if state.ndim not in (1, 2):
                    what = f"hx[{i}]" if len(states) > 1 else "hidden"
                    raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got "
                                     f"{state.ndim}D instead")
        batched = input.ndim == 2
        if not batched:
            input = input.unsqueeze(0)
        if states is None:
            zeros = creation.zeros(input.shape[0], self.hidden_size, dtype=input.dtype)
            states = [zeros] * (2 if isinstance(self, LSTMCell) else 1)
        elif not batched:
            states = [s.unsqueeze(0) for s in states]
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} "
                               f"expected {self.input_size}")
        for i, state in enumerate(states):
            if state.shape[0] != input.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{i} "
                                   f"batch size {state.shape[0]}")
            if state.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got "
                                   f"{state.shape[1]}, expected {self.hidden_size}")
        hx = tuple(states) if len(states) > 1 else states[0]
        out = cell(input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if batched:
            return out
        return tuple(o.squeeze(0) for o in out) if isinstance(out, tuple) else out.squeeze(0)


class RNNCell(RNNCellBase):
    """One Elman step, h' = tanh (or relu)(x W_ih^T + b_ih + h W_hh^T + b_hh)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device,
                         dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        cells = {"tanh": ops.rnn_tanh_cell, "relu": ops.rnn_relu_cell}
        if self.nonlinearity not in cells:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return self._step(cells[self.nonlinearity], input, None if hx is None else [hx])


class LSTMCell(RNNCellBase):
    """One LSTM step on hx = (h, c), returning (h', c')."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device,
                         dtype=dtype)

    def forward(self, input, hx=None):
        return self._step(ops.lstm_cell, input, None if hx is None else list(hx))


class GRUCell(RNNCellBase):
    """One GRU step."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device,
                         dtype=dtype)

    def forward(self, input, hx=None):
        return self._step(ops.gru_cell, input, None if hx is None else [hx])
