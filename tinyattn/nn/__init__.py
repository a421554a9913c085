"""Modules: the building blocks of every model, named as in torch.nn."""
from . import init
from .layers import (GELU, MLP, Conv2d, Dropout, Embedding, Identity, LayerNorm, Linear, MoE, PatchEmbed, ReLU,
                     RMSNorm, SiLU, SwiGLU, Tanh, residual)
from .module import Module, ModuleList, Parameter, Sequential
from .rnn import GRU, GRUCell, LSTM, LSTMCell, RNN, RNNCell
from . import utils
from .attention import AdditiveAttention, KVCache, MultiHeadAttention, SelfAttention2d
from .window_attention import WindowAttention, shifted_window_mask, window_partition, window_reverse
from .position import (LearnedPositionalEmbedding, RelativePositionBias, RotaryEmbedding,
                       SinusoidalPositionalEncoding, interpolate_pos_embed, sincos_2d_table, sinusoidal_table)
