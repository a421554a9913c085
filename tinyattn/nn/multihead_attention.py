"""torch.nn.MultiheadAttention with PyTorch's own signature, parameter names and mask conventions, so code written
for it (and its weights) ports as it is. tinyattn's own nn.Attention (attention.py) is the one the models
use: self- and cross-attention with GQA, a KV cache and the flash path.

PyTorch's conventions here differ from F.scaled_dot_product_attention's: a boolean attn_mask is True where
attention is NOT allowed, key_padding_mask is True at padding, inputs are (L, N, E) unless batch_first, and the
forward returns (output, weights) with the weights averaged over heads unless average_attn_weights=False.
is_causal is a hint that attn_mask is the causal mask; as in PyTorch, without a key_padding_mask and with
need_weights=False the causal mask (top-left) is the one applied, whatever attn_mask holds.
Its activation points and last_weights are nn.Attention's (attention.AttentionWithPoints): need_weights=True
keeps the (N, H, L, S) weights, before dropout, that hook_pattern passes, in .last_weights.
"""
import math

from .. import functional as F
from ..backend import xp_of
from ..tensor import Tensor, as_array
from . import init
from .attention import AttentionWithPoints
from .layers import Linear, _parameter


class MultiheadAttention(AttentionWithPoints):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("add_bias_kv and add_zero_attn are not supported")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim = embed_dim // num_heads
        if self.kdim == self.vdim == embed_dim:
            self.in_proj_weight = init.xavier_uniform_(_parameter(3 * embed_dim, embed_dim))
        else:
            self.q_proj_weight = init.xavier_uniform_(_parameter(embed_dim, embed_dim))
            self.k_proj_weight = init.xavier_uniform_(_parameter(embed_dim, self.kdim))
            self.v_proj_weight = init.xavier_uniform_(_parameter(embed_dim, self.vdim))
        self.in_proj_bias = init.zeros_(_parameter(3 * embed_dim)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias)
        if bias:
            init.zeros_(self.out_proj.bias)

    def _projections(self, query, key, value):
        e = self.embed_dim
        weights = (self.in_proj_weight[:e], self.in_proj_weight[e:2 * e], self.in_proj_weight[2 * e:]) \
            if "in_proj_weight" in self._parameters else (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        biases = (None,) * 3 if self.in_proj_bias is None else \
            (self.in_proj_bias[:e], self.in_proj_bias[e:2 * e], self.in_proj_bias[2 * e:])
        return [F.linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases)]

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if is_causal and attn_mask is None:
            raise RuntimeError("is_causal is a hint that attn_mask is the causal mask: pass that mask too (as "
                               "PyTorch asks)")
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = (x.unsqueeze(1) for x in (query, key, value))
        if self.batch_first and not unbatched:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        length, batch, _ = query.shape
        q, k, v = (self._heads(x, batch) for x in self._projections(query, key, value))   # (N, H, L or S, E/H)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if is_causal and key_padding_mask is None and not need_weights:       # PyTorch's road to causal SDPA
            allowed = F.attention_inputs.causal_mask(length, k.shape[2], xp_of(as_array(q)))
            attn_mask = Tensor(~allowed)                                         # True: may NOT attend
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim)) + self._bias(
            attn_mask, key_padding_mask, batch, length, k.shape[2], q)
        with self.hook_pattern.keeping(need_weights):
            probabilities = self.hook_pattern(F.softmax(self.hook_attn_scores(scores), dim=-1))
        weights = F.dropout(probabilities, self.dropout, self.training)
        out = self._out_proj_by_head(self.hook_z((weights @ v).transpose(1, 2)))     # z: (N, L, H, E/H)
        if not self.batch_first or unbatched:
            out = out.transpose(0, 1)                                            # (L, N, E)
        if unbatched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        if not need_weights:
            return out, None
        return out, (weights.mean(dim=-3) if average_attn_weights else weights)

    def _heads(self, x, batch):
        """(length, N, E) -> (N, H, length, E / H)."""
        return x.reshape(x.shape[0], batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _bias(self, attn_mask, key_padding_mask, batch, length, keys, like):
        """What is added to the scores (N, H, L, S): -inf where a mask forbids, a float attn_mask's values."""
        bias = 0.0
        if attn_mask is not None:
            expected = {2: (length, keys), 3: (batch * self.num_heads, length, keys)}.get(attn_mask.ndim)
            if tuple(attn_mask.shape) != expected:
                raise RuntimeError(f"attn_mask must have shape (L, S) = {(length, keys)} or (N * num_heads, L, S) = "
                                   f"{(batch * self.num_heads, length, keys)}, got {tuple(attn_mask.shape)}")
            if attn_mask.ndim == 3:                                              # (N * H, L, S)
                attn_mask = attn_mask.reshape(batch, self.num_heads, length, keys)
            bias = bias + self._as_bias(attn_mask, "attn_mask", like)
        if key_padding_mask is not None:
            pad = as_array(key_padding_mask)
            if tuple(pad.shape) != (batch, keys) and tuple(pad.shape) != (keys,):
                raise RuntimeError(f"key_padding_mask must have shape (N, S) = {(batch, keys)}, got {pad.shape}")
            bias = bias + self._as_bias(pad.reshape(-1, 1, 1, keys), "key_padding_mask", like)
        return bias

    @staticmethod
    def _as_bias(mask, name, like):
        if mask.dtype == bool:                                                   # True: may NOT attend here
            return Tensor(F.attention_inputs.additive_mask(~as_array(mask), like.dtype))
        if mask.dtype.kind != "f":
            raise RuntimeError(f"only bool and floating types of {name} are supported, got {mask.dtype}")
        return mask if isinstance(mask, Tensor) else Tensor(mask)

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"
