"""Modules: the building blocks of every model, named as in torch.nn."""
from . import init
from .layers import (GELU, MLP, Conv2d, Dropout, Embedding, Identity, LayerNorm, Linear, MoE, PatchEmbed, ReLU,
                     RMSNorm, SiLU, SwiGLU, Tanh)
from .module import Module, ModuleList, Parameter, Sequential
from .rnn import GRU, GRUCell, LSTM, LSTMCell, RNN, RNNCell
