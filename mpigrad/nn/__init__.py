"""Neural-network building blocks, with torch.nn's names."""
import importlib

from .parameter import Parameter, Buffer  # noqa: F401
from .module import Module  # noqa: F401
from . import functional, init, utils  # noqa: F401
from .linear import Identity, Linear  # noqa: F401
from .conv import Conv2d  # noqa: F401
from .pooling import MaxPool2d, AvgPool2d  # noqa: F401
from .activation import (ReLU, LeakyReLU, GELU, SiLU, Tanh, Sigmoid, Softmax,  # noqa: F401
                         LogSoftmax)
from .dropout import Dropout, Dropout1d, Dropout2d  # noqa: F401
from .normalization import BatchNorm1d, BatchNorm2d, LayerNorm, SyncBatchNorm  # noqa: F401
from .sparse import Embedding, EmbeddingBag  # noqa: F401
from .flatten import Flatten, Unflatten  # noqa: F401
from .container import Sequential, ModuleList, ModuleDict  # noqa: F401
from .loss import CrossEntropyLoss, NLLLoss, MSELoss  # noqa: F401
from .conv import Conv1d, ConvTranspose1d, ConvTranspose2d  # noqa: F401
from .rearrange import (PixelShuffle, PixelUnshuffle, Unfold, Fold, ConstantPad2d,  # noqa: F401
                        ZeroPad2d, ConstantPad1d, ConstantPad3d, ZeroPad1d, ZeroPad3d,
                        ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d,
                        ReplicationPad2d, ReplicationPad3d, CircularPad1d, CircularPad2d,
                        CircularPad3d)
from .normalization import GroupNorm, InstanceNorm1d, InstanceNorm2d  # noqa: F401
from .upsampling import Upsample, UpsamplingNearest2d, UpsamplingBilinear2d  # noqa: F401
from .pooling import AdaptiveAvgPool1d, AdaptiveAvgPool2d  # noqa: F401
from .pooling import MaxPool1d, AvgPool1d, AdaptiveMaxPool1d, AdaptiveMaxPool2d  # noqa: F401
from .activation import MultiheadAttention  # noqa: F401
from .linear import NonDynamicallyQuantizableLinear, Bilinear  # noqa: F401
from .transformer import (Transformer, TransformerEncoder, TransformerDecoder,  # noqa: F401
                          TransformerEncoderLayer, TransformerDecoderLayer)
from .normalization import RMSNorm  # noqa: F401
from .loss import (L1Loss, SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss,  # noqa: F401
                   KLDivLoss, CosineEmbeddingLoss, MarginRankingLoss, TripletMarginLoss,
                   GaussianNLLLoss, PoissonNLLLoss, TripletMarginWithDistanceLoss,
                   SoftMarginLoss, HingeEmbeddingLoss, MultiLabelSoftMarginLoss,
                   MultiMarginLoss, MultiLabelMarginLoss, CTCLoss)
from .distance import PairwiseDistance, CosineSimilarity  # noqa: F401
from .container import ParameterList, ParameterDict  # noqa: F401
from .activation import (Hardtanh, ReLU6, SELU, Hardsigmoid, Hardswish, Mish, ELU,  # noqa: F401
                         CELU, Softplus, Softsign, LogSigmoid, GLU, Threshold, PReLU)
from .rnn import RNNBase, RNN, LSTM, GRU, RNNCellBase, RNNCell, LSTMCell, GRUCell  # noqa: F401
from . import modules  # noqa: F401,E402  (torch.nn.modules' paths to the classes above)


def __getattr__(name):
    # torch.nn.parallel is there after a bare `import torch`; ours imports mpigrad.distributed,
    # which starts MPI, so it is imported on first use rather than with mpigrad.nn.
    if name == "parallel":
        return importlib.import_module(".parallel", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
