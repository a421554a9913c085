"""The Transformer encoder-decoder of "Attention Is All You Need" (Vaswani et al. 2017).

Source and target tokens are embedded (scaled by sqrt(d_model)) and given sinusoidal positions. Each encoder layer is
self-attention then a feed-forward network; each decoder layer is causal self-attention, cross-attention over the
encoder's output, then the feed-forward network. Every sub-layer is wrapped as LayerNorm(x + sublayer(x)) (post-norm,
the paper's choice) or x + sublayer(LayerNorm(x)) (pre-norm, norm_first=True, which trains more easily when deep).
"""
import math
from dataclasses import dataclass

from .. import backend
from .. import functional as F
from ..tensor import Tensor, as_array, no_grad
from .. import nn
from ..nn.attention import check_impl


@dataclass
class TransformerConfig:
    src_vocab: int
    tgt_vocab: int
    d_model: int = 64
    num_heads: int = 4
    n_layers: int = 2
    d_ff: int = None                 # None: 4 * d_model
    dropout: float = 0.1
    norm_first: bool = False         # False: post-norm (the paper); True: pre-norm
    max_len: int = 128
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    impl: str = "sdpa"

    def __post_init__(self):
        self.impl = check_impl(self.impl)          # refused early; "naive", the old name of "sdpa", kept as "sdpa"


def _feed_forward(config):
    return nn.MLP(config.d_model, config.d_ff or 4 * config.d_model, activation=nn.ReLU())


def _attention(config, cross=False):
    return nn.Attention(config.d_model, config.num_heads, dropout=config.dropout if config.impl != "flash" else 0.0,
                        impl=config.impl, cross=cross)


class _Layer(nn.Module):
    """Sublayers, each with a residual connection and a LayerNorm of its own (norm1, norm2, ...)."""

    def __init__(self, config, sublayers):
        super().__init__()
        self.config = config
        for i in range(sublayers):
            setattr(self, f"norm{i + 1}", nn.LayerNorm(config.d_model))

    def _residual(self, x, sublayer, norm):
        return nn.residual(x, sublayer, norm, self.config.norm_first, self.config.dropout, self.training)


class EncoderLayer(_Layer):
    def __init__(self, config):
        super().__init__(config, sublayers=2)
        self.self_attn, self.ff = _attention(config), _feed_forward(config)

    def forward(self, x, src_pad):
        x = self._residual(x, lambda h: self.self_attn(h, key_padding_mask=src_pad), self.norm1)
        return self._residual(x, self.ff, self.norm2)


class DecoderLayer(_Layer):
    def __init__(self, config):
        super().__init__(config, sublayers=3)
        self.self_attn, self.cross_attn = _attention(config), _attention(config, cross=True)
        self.ff = _feed_forward(config)

    def forward(self, y, memory, src_pad, tgt_pad, need_weights=False):
        # The subsequent mask: position t sees targets up to t only.
        y = self._residual(y, lambda h: self.self_attn(h, is_causal=True, key_padding_mask=tgt_pad), self.norm1)
        y = self._residual(y, lambda h: self.cross_attn(h, context=memory, key_padding_mask=src_pad,
                                                        need_weights=need_weights), self.norm2)
        return self._residual(y, self.ff, self.norm3)


class Transformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.src_embed = nn.Embedding(config.src_vocab, config.d_model, padding_idx=config.pad_id)
        self.tgt_embed = nn.Embedding(config.tgt_vocab, config.d_model, padding_idx=config.pad_id)
        self.positions = nn.SinusoidalPositionalEncoding(config.d_model, config.max_len)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))
        # Pre-norm leaves the residual stream unnormalised, so it needs a final norm; post-norm already ends in one.
        self.encoder_norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()
        self.generator = nn.Linear(config.d_model, config.tgt_vocab)
        for embed in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embed.weight, std=config.d_model ** -0.5)
            embed.weight.array[config.pad_id] = 0

    def _embed(self, embedding, ids):
        x = self.positions(embedding(ids) * math.sqrt(self.config.d_model))
        return F.dropout(x, self.config.dropout, self.training)

    def encode(self, src):
        src = as_array(src)
        src_pad = src == self.config.pad_id
        x = self._embed(self.src_embed, src)
        for layer in self.encoder_layers:
            x = layer(x, src_pad)
        return self.encoder_norm(x), src_pad

    def decode(self, tgt_in, memory, src_pad, need_weights=False):
        tgt_in = as_array(tgt_in)
        tgt_pad = tgt_in == self.config.pad_id
        y = self._embed(self.tgt_embed, tgt_in)
        for layer in self.decoder_layers:
            y = layer(y, memory, src_pad, tgt_pad, need_weights)
        return self.generator(self.decoder_norm(y))

    def forward(self, src, tgt_in):
        """Teacher forcing: logits (B, T, tgt_vocab) for each position of tgt_in."""
        memory, src_pad = self.encode(src)
        return self.decode(tgt_in, memory, src_pad)

    @no_grad()
    def greedy_decode(self, src, max_len):
        """Decode from BOS, feeding back the argmax. Returns ids (B, max_len) and, per decoder layer, the cross-
        attention weights (B, heads, max_len, S) of the final pass (each row is the step that produced that token)."""
        src = as_array(src)
        xp = backend.xp_of(src)
        memory, src_pad = self.encode(src)
        ids = xp.full((src.shape[0], 1), self.config.bos_id, dtype=src.dtype)
        for _ in range(max_len):
            logits = self.decode(ids, memory, src_pad)
            ids = xp.concatenate([ids, logits.array[:, -1].argmax(axis=-1)[:, None].astype(src.dtype)], axis=1)
        self.decode(ids[:, :-1], memory, src_pad, need_weights=True)
        maps = [layer.cross_attn.last_weights for layer in self.decoder_layers]
        return Tensor(ids[:, 1:]), maps
