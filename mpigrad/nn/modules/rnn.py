"""torch.nn.modules.rnn's path to the same classes as mpigrad.nn."""
from ..rnn import (RNNBase, RNN, LSTM, GRU, RNNCellBase, RNNCell, LSTMCell, GRUCell)  # noqa: F401
