"""torch.nn.modules.sparse's path to the same classes as mpigrad.nn."""
from ..sparse import (Embedding, EmbeddingBag)  # noqa: F401
