"""torch.nn.modules.padding's path to the same classes as mpigrad.nn."""
from ..rearrange import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d,  # noqa: F401
                         ConstantPad2d, ConstantPad3d, ReflectionPad1d,
                         ReflectionPad2d, ReflectionPad3d, ReplicationPad1d,
                         ReplicationPad2d, ReplicationPad3d, ZeroPad1d, ZeroPad2d,
                         ZeroPad3d)
