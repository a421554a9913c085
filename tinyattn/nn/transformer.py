"""torch.nn.Transformer and its family with PyTorch's arguments, parameter names and masks, so code written for them
(word_language_model's TransformerModel(nn.Transformer), seq2seq tutorials) and their state_dicts port as they are.
tinyattn's own encoder-decoder, written out as a model, is models/transformer.py.

Each layer wraps its sub-layers (self-attention, the decoder's cross-attention, the feed-forward network) as
LayerNorm(x + dropout(sublayer(x))) (post-norm, the paper's) or x + dropout(sublayer(LayerNorm(x))) (norm_first).
The attention inside is nn.MultiheadAttention, so masks follow it: a bool mask is True where attention is NOT
allowed, a float mask is added to the scores, a key padding mask is True at padding. is_causal says the mask given is
the causal one (see MultiheadAttention); the stacks, given None, look at the mask to decide, as PyTorch's do.
"""
import copy

from .. import functional as F
from ..creation import full
from ..ops import triu
from ..tensor import as_array
from . import init
from .layers import Dropout, LayerNorm, Linear
from .module import Module, ModuleList
from .multihead_attention import MultiheadAttention

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def generate_square_subsequent_mask(sz, device=None, dtype=None):
    """The float causal mask (sz, sz): -inf above the diagonal (a later position), 0 elsewhere."""
    return triu(full((sz, sz), float("-inf"), dtype=dtype, device=device), diagonal=1)


def _detect_is_causal_mask(mask, is_causal, size):
    """is_causal as given; when None, whether mask equals the causal mask of the sequence's length (PyTorch's rule)."""
    if is_causal is not None or mask is None or (mask.dtype != bool and mask.dtype.kind != "f"):
        return is_causal is True                  # (an integer mask is refused by the attention, by name)
    causal = generate_square_subsequent_mask(size, device=mask.device, dtype=mask.dtype)
    return tuple(mask.shape) == (size, size) and bool((as_array(mask) == as_array(causal)).all())


def _sequence_length(x, batch_first):
    return x.shape[1 if batch_first and x.ndim == 3 else 0]


def _placed(module, device, dtype):
    """The module with its parameters on device in dtype when either is given (PyTorch's factory arguments)."""
    return module if device is None and dtype is None else module.to(device=device, dtype=dtype)


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: self-attention, (the decoder's cross-attention,) the feed-forward
    network linear2(dropout(activation(linear1(x)))), one LayerNorm and one Dropout per sub-layer, all in PyTorch's
    order, so that state_dict keys come out in PyTorch's order too."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                 bias, device, dtype, sublayers):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        if sublayers == 3:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                     batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        for i in range(1, sublayers + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for i in range(1, sublayers + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise RuntimeError(f"activation should be relu/gelu, not {activation}")
            activation = _ACTIVATIONS[activation]
        if not callable(activation):
            raise TypeError(f"activation must be 'relu', 'gelu' or a callable, got {type(activation).__name__}")
        self.activation = activation
        _placed(self, device, dtype)

    def _residual(self, x, norm, sublayer):
        return x + sublayer(norm(x)) if self.norm_first else norm(x + sublayer(x))

    @staticmethod
    def _attend(attention, x, memory, mask, key_padding_mask, is_causal, dropout):
        return dropout(attention(x, memory, memory, attn_mask=mask, key_padding_mask=key_padding_mask,
                                 need_weights=False, is_causal=is_causal)[0])

    def _feed_forward(self, x, dropout):
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention, then the feed-forward network."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                         norm_first, bias, device, dtype, sublayers=2)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = self._residual(src, self.norm1, lambda h: self._attend(
            self.self_attn, h, h, src_mask, src_key_padding_mask, is_causal, self.dropout1))
        return self._residual(x, self.norm2, lambda h: self._feed_forward(h, self.dropout2))


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention over the target, cross-attention over the encoder's output (memory), the feed-forward network."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                         norm_first, bias, device, dtype, sublayers=3)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = self._residual(tgt, self.norm1, lambda h: self._attend(
            self.self_attn, h, h, tgt_mask, tgt_key_padding_mask, tgt_is_causal, self.dropout1))
        x = self._residual(x, self.norm2, lambda h: self._attend(
            self.multihead_attn, h, memory, memory_mask, memory_key_padding_mask, memory_is_causal, self.dropout2))
        return self._residual(x, self.norm3, lambda h: self._feed_forward(h, self.dropout3))


def _clones(layer, num_layers):
    """num_layers independent deep copies of layer (its own parameters each: layers.0, layers.1, ...)."""
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(Module):
    """num_layers copies of encoder_layer, then norm if given. PyTorch's nested-tensor fast path does not exist here:
    enable_nested_tensor and mask_check are kept as attributes only (use_nested_tensor is always False)."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor, self.use_nested_tensor, self.mask_check = enable_nested_tensor, False, mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        batch_first = self.layers[0].self_attn.batch_first
        is_causal = _detect_is_causal_mask(mask, is_causal, _sequence_length(src, batch_first))
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, is_causal=is_causal, src_key_padding_mask=src_key_padding_mask)
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(Module):
    """num_layers copies of decoder_layer, then norm if given."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        batch_first = self.layers[0].self_attn.batch_first
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, _sequence_length(tgt, batch_first))
        output = tgt
        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                           memory_is_causal=memory_is_causal)
        return output if self.norm is None else self.norm(output)


class Transformer(Module):
    """The encoder-decoder of "Attention Is All You Need": an encoder and a decoder stack, each ending in a LayerNorm
    (encoder.norm, decoder.norm), every weight matrix drawn by xavier_uniform_. custom_encoder / custom_decoder
    replace a stack; a subclass may also replace self.decoder afterwards (word_language_model does)."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation=F.relu, custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                      bias, device, dtype)

        def final_norm():
            return _placed(LayerNorm(d_model, eps=layer_norm_eps, bias=bias), device, dtype)

        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(*layer_args), num_encoder_layers, final_norm())
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(*layer_args), num_decoder_layers, final_norm())
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise RuntimeError(f"the batch number of src and tgt must be equal: src {tuple(src.shape)}, tgt "
                               f"{tuple(tgt.shape)} (batch_first={self.batch_first})")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"the feature number of src and tgt must be equal to d_model {self.d_model}: src "
                               f"{tuple(src.shape)}, tgt {tuple(tgt.shape)}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
