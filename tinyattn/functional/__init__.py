"""Fused Functions with hand-derived backward. Import as ``import tinyattn.functional as F``.

softmax.py: softmax, log_softmax, cross_entropy, mse_loss. layers.py: linear, embedding, layer_norm, rms_norm, gelu,
silu, dropout, conv2d. attention.py: scaled_dot_product_attention, attention_weights, additive_attention,
flash_attention.
"""
from ..ops import relu, sigmoid, tanh
from ..tensor import Tensor
from .attention import (additive_attention, attention_weights, causal_mask, flash_attention,
                        scaled_dot_product_attention)
from .layers import conv2d, dropout, embedding, gelu, gru_cell, layer_norm, linear, rms_norm, silu
from .softmax import cross_entropy, log_softmax, mse_loss, softmax

Tensor.softmax = lambda self, dim=-1: softmax(self, dim)
Tensor.log_softmax = lambda self, dim=-1: log_softmax(self, dim)
