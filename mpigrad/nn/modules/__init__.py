"""torch.nn.modules' paths (`torch.nn.modules.linear.Linear`, ...) to mpigrad.nn's classes,
for scripts and pickled models that name them so. Only the classes mpigrad has are here."""
from . import (activation, batchnorm, container, conv, distance, dropout, flatten,  # noqa: F401
               fold, instancenorm, linear, loss, module, normalization, padding, pixelshuffle,
               pooling, rnn, sparse, transformer, upsampling)
from ..module import Module  # noqa: F401
