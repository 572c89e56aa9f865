"""Loss modules: thin wrappers over the functional losses, with arguments checked up front."""
from .. import creation
from . import functional as F
from .module import Module


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        F._check_reduction(reduction)
        self.reduction = reduction


class _WeightedLoss(_Loss):
    """Keeps the per-class weight as a buffer, so it follows the module's dtype and state."""

    def __init__(self, weight=None, reduction="mean"):
        super().__init__(reduction)
        if weight is not None and weight.ndim != 1:
            raise ValueError(f"{type(self).__name__}: weight must be a 1-D tensor with one "
                             f"entry per class, got shape {tuple(weight.shape)}")
        self.register_buffer("weight", None if weight is None else creation.as_tensor(weight))


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class-index targets, given log-probabilities."""

    def __init__(self, weight=None, *, ignore_index=-100, reduction="mean"):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """log_softmax plus negative log-likelihood, with optional label smoothing."""

    def __init__(self, weight=None, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(weight, reduction)
        F._check_probability(label_smoothing, "label_smoothing")
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                               self.label_smoothing)
