"""Neural-network building blocks, with torch.nn's names."""
from .parameter import Parameter, Buffer  # noqa: F401
from .module import Module  # noqa: F401
