"""Layer modules, by family."""
from .activation import *  # noqa: F401,F403
from .activation import PReLU, Softmax2d  # noqa: F401
from .adaptive import AdaptiveLogSoftmaxWithLoss, CrossMapLRN2d  # noqa: F401
from .batchnorm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm,  # noqa: F401
                        InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LocalResponseNorm,
                        SyncBatchNorm)
from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,  # noqa: F401
                   ConvTranspose3d)
from .container import (Container, ModuleDict, ModuleList, ParameterDict,  # noqa: F401
                        ParameterList, Sequential)
from .distance import CosineSimilarity, PairwiseDistance  # noqa: F401
from .dropout import (AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d,  # noqa: F401
                      FeatureAlphaDropout)
from .linear import Bilinear, Flatten, Identity, Linear, Unflatten  # noqa: F401
from .lazy import (LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyConv1d,  # noqa: F401
                   LazyConv2d, LazyConv3d, LazyConvTranspose1d, LazyConvTranspose2d,
                   LazyConvTranspose3d, LazyInstanceNorm1d, LazyInstanceNorm2d,
                   LazyInstanceNorm3d, LazyLinear, LazyModuleMixin)
from .loss import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CrossEntropyLoss,  # noqa
                   CTCLoss, GaussianNLLLoss, HingeEmbeddingLoss, HuberLoss, KLDivLoss, L1Loss,
                   LinearCrossEntropyLoss, LinearCrossEntropyOptions,
                   MarginRankingLoss, MSELoss, MultiLabelMarginLoss, MultiLabelSoftMarginLoss,
                   MultiMarginLoss, NLLLoss, NLLLoss2d, PoissonNLLLoss, SmoothL1Loss,
                   SoftMarginLoss, TripletMarginLoss, TripletMarginWithDistanceLoss)
from .module import Module  # noqa: F401
from .normalization import LayerNorm, RMSNorm  # noqa: F401
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d,  # noqa: F401
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool1d,
                      AvgPool2d, AvgPool3d, ChannelShuffle, CircularPad1d, CircularPad2d,
                      CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d, Fold,
                      FractionalMaxPool2d, FractionalMaxPool3d, LPPool1d, LPPool2d,
                      LPPool3d, MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d,
                      MaxUnpool3d, PixelShuffle, PixelUnshuffle, ReflectionPad1d,
                      ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
                      ReplicationPad3d, Unfold, Upsample, UpsamplingBilinear2d,
                      UpsamplingNearest2d, ZeroPad1d, ZeroPad2d, ZeroPad3d)
from .sparse import Embedding, EmbeddingBag  # noqa: F401
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: F401
from .transformer import (MultiheadAttention, Transformer, TransformerDecoder,  # noqa: F401
                          TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer)
