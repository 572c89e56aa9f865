"""torch.nn.modules.distance's path to the same classes as mpigrad.nn."""
from ..distance import (PairwiseDistance, CosineSimilarity)  # noqa: F401
