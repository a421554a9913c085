"""Functions with hand-derived backward, named as torch.nn.functional. Import as ``import tinyattn.functional as F``.

Each fused Function has a reference twin (plain array code, the test oracle) beside its fast version; twins.py says
which one runs (`with ta.reference():` picks the twins; `F.use(softmax=MySoftmax)` runs a Function of one's own
instead of both). One file per family: softmax.py, losses.py, linear.py, embedding.py, normalization.py,
activations.py, dropout.py, recurrent.py (the GRU step), conv.py, attention.py (scaled dot-product),
additive_attention.py (Bahdanau), flash_attention.py (the public function and its reference; flash_attention_fast.py
its fast twin; flash_kernel.py and flash_attention.cu, its CUDA kernels). A family whose fast twin outgrows its
reference splits so: X.py holds the public function and the reference, X_fast.py the fast twin, which registers
itself with twins. attention_inputs.py holds what the attention functions share.
"""
from ..ops import logsigmoid, pad, relu, sigmoid, tanh
from ..tensor import Tensor
from .activations import gelu, glu, silu, softplus
from .additive_attention import additive_attention, additive_scores
from .attention import attention_weights, scaled_dot_product_attention
from .attention_inputs import causal_mask
from .conv import conv2d, unfold
from .dropout import check_probability, dropout
from .embedding import embedding, one_hot, padding_row
from .flash_attention import flash_attention
from . import flash_attention_fast  # noqa: F401 (registers flash attention's fast twin)
from .flash_trace import trace_flash_attention
from .interpolation import interpolate
from .linear import linear
from .losses import binary_cross_entropy_with_logits, cross_entropy, kl_div, mse_loss, nll_loss
from .normalization import layer_norm, normalize, rms_norm
from .recurrent import gru_cell
from .softmax import log_softmax, softmax
from .twins import reference, use

Tensor.softmax = lambda self, dim=-1: softmax(self, dim)
Tensor.log_softmax = lambda self, dim=-1: log_softmax(self, dim)
