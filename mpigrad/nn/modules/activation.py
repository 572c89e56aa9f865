"""torch.nn.modules.activation's path to the same classes as mpigrad.nn."""
from ..activation import (Threshold, ReLU, Hardtanh, ReLU6, Sigmoid, Hardsigmoid,  # noqa: F401
                          Tanh, SiLU, Mish, Hardswish, ELU, CELU, SELU, GLU, GELU,
                          LeakyReLU, LogSigmoid, Softplus, MultiheadAttention, PReLU,
                          Softsign, Softmax, LogSoftmax)
