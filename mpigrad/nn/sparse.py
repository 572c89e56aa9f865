"""Embedding: a lookup table of learnable rows."""
from .. import creation
from ..autograd import grad_mode
from . import _checks, functional as F, init
from ._checks import check_device, positive_int
from .module import Module
from .parameter import Parameter


class Embedding(Module):
    """weight[indices] for integer indices, weight of shape (num_embeddings, embedding_dim)
    initialised N(0, 1). The padding_idx row starts at zero and receives no gradient. With
    sparse=True the weight's gradient is a sparse COO tensor of the looked-up rows (for
    optim.SparseAdam, SGD or Adagrad), as torch's."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None):
        super().__init__()
        check_device(device, "Embedding")
        self.num_embeddings = positive_int("num_embeddings", num_embeddings, "Embedding")
        self.embedding_dim = positive_int("embedding_dim", embedding_dim, "Embedding")
        self.padding_idx = _checks.embedding_padding_idx("Embedding", num_embeddings, padding_idx)
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(creation.empty(num_embeddings, embedding_dim, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: _weight must have shape ({num_embeddings}, "
                                 f"{embedding_dim}), got {tuple(_weight.shape)}")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with grad_mode.no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """An Embedding whose weight shares storage with the 2-D `embeddings`."""
        if embeddings.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: expected a 2-D tensor, got shape "
                             f"{tuple(embeddings.shape)}")
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)

    def extra_repr(self):
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            text += f", max_norm={self.max_norm}"
        return text


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings (see F.embedding_bag), without building
    the looked-up rows' full sequence as an output. weight starts N(0, 1), its padding_idx
    row zero."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, mode="mean", sparse=False, _weight=None,
                 include_last_offset=False, padding_idx=None, device=None, dtype=None):
        super().__init__()
        check_device(device, "EmbeddingBag")
        self.num_embeddings = positive_int("num_embeddings", num_embeddings, "EmbeddingBag")
        self.embedding_dim = positive_int("embedding_dim", embedding_dim, "EmbeddingBag")
        if sparse:
            raise NotImplementedError("EmbeddingBag: sparse gradients are not supported; use "
                                      "sparse=False, or Embedding(sparse=True) and a sum")
        self.padding_idx = _checks.embedding_padding_idx("EmbeddingBag", num_embeddings,
                                                         padding_idx)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset = include_last_offset
        if _weight is None:
            self.weight = Parameter(creation.empty(num_embeddings, embedding_dim, dtype=dtype))
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"EmbeddingBag: _weight must have shape ({num_embeddings}, "
                                 f"{embedding_dim}), got {tuple(_weight.shape)}")
            self.weight = Parameter(_weight)

    reset_parameters = Embedding.reset_parameters

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse,
                               per_sample_weights, self.include_last_offset, self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, mode="mean", sparse=False,
                        include_last_offset=False, padding_idx=None):
        """An EmbeddingBag whose weight shares storage with the 2-D `embeddings`."""
        if embeddings.ndim != 2:
            raise ValueError(f"EmbeddingBag.from_pretrained: expected a 2-D tensor, got shape "
                             f"{tuple(embeddings.shape)}")
        bag = cls(*embeddings.shape, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                  embeddings, include_last_offset, padding_idx)
        bag.weight.requires_grad_(not freeze)
        return bag

    def extra_repr(self):
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            text += f", max_norm={self.max_norm!r}"
        if self.norm_type != 2:
            text += f", norm_type={self.norm_type!r}"
        if self.scale_grad_by_freq:
            text += f", scale_grad_by_freq={self.scale_grad_by_freq!r}"
        text += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx!r}"
        return text
