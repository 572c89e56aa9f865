"""torch.nn.modules.loss's path to the same classes as mpigrad.nn."""
from ..loss import (L1Loss, NLLLoss, PoissonNLLLoss, GaussianNLLLoss, KLDivLoss,  # noqa: F401
                    MSELoss, BCELoss, BCEWithLogitsLoss, HingeEmbeddingLoss,
                    MultiLabelMarginLoss, SmoothL1Loss, HuberLoss, SoftMarginLoss,
                    CrossEntropyLoss, MultiLabelSoftMarginLoss, CosineEmbeddingLoss,
                    MarginRankingLoss, MultiMarginLoss, TripletMarginLoss,
                    TripletMarginWithDistanceLoss, CTCLoss)
