"""Modules: the building blocks of every model, named as in torch.nn."""
import sys

from .. import functional
from . import init
from .einops_layers import Rearrange, Reduce
from .hook_point import RESIDUAL_POINTS, HookPoint, add_points
from .lazy import LazyConv2d, LazyLinear
from .layers import (GELU, MLP, Conv2d, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear, LogSoftmax, MoE,
                     PatchEmbed, ReLU, RMSNorm, Sigmoid, SiLU, Softmax, SwiGLU, Tanh, residual)
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, KLDivLoss, MSELoss, NLLLoss
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential
from .multihead_attention import MultiheadAttention
from .rnn import GRU, GRUCell, LSTM, LSTMCell, RNN, RNNCell
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer)
from . import parallel, utils
from .attention import AdditiveAttention, Attention, KVCache, MultiHeadAttention, SelfAttention2d
from .window_attention import WindowAttention, shifted_window_mask, window_partition, window_reverse
from .position import (LearnedPositionalEmbedding, RelativePositionBias, RotaryEmbedding,
                       SinusoidalPositionalEncoding, interpolate_pos_embed, sincos_2d_table, sinusoidal_table)

# torch.nn.functional's path: `import tinyattn.nn.functional as F` gives tinyattn.functional itself.
sys.modules[__name__ + ".functional"] = functional
