"""torch.nn.modules.container's path to the same classes as mpigrad.nn."""
from ..container import (Sequential, ModuleList, ModuleDict, ParameterList,  # noqa: F401
                         ParameterDict)
