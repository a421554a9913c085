"""Attention modules: additive (Bahdanau), multi-head self- and cross-attention with GQA/MQA and a KV cache, and
self-attention over a CNN's feature map. (Swin's window attention is in window_attention.py.)

Mask conventions, in one place:
- attn_mask (as in F.scaled_dot_product_attention): boolean True = may attend; a float mask is added to the scores.
- key_padding_mask (as in torch.nn.MultiheadAttention): boolean (B, S), True = this key is padding, ignore it.
- is_causal: query i sees keys up to its own position. The module aligns the mask to the end of the keys
  (query i sits at absolute position S - L + i), which is what cached decoding needs; when L == S it is the same as
  PyTorch's top-left is_causal.
"""
import contextlib
import math

from .. import backend, ops
from .. import functional as F
from ..creation import zeros
from ..functional.attention import one_blas_thread
from ..tensor import Tensor, as_array
from .hook_point import add_points
from .layers import Linear, _parameter
from .module import Module, Parameter
from . import init


class AdditiveAttention(Module):
    """Bahdanau attention as a module: W_q (H, Dq), W_k (H, Dk) and v (H,), scores v^T tanh(W_q q + W_k k)."""

    def __init__(self, query_size, key_size, hidden_size):
        super().__init__()
        self.w_query = Linear(query_size, hidden_size, bias=False)
        self.w_key = Linear(key_size, hidden_size, bias=False)
        self.v = init.default_uniform_(_parameter(hidden_size), hidden_size)

    def project_keys(self, key):
        """W_k k for every source position: compute once per source sentence, pass as key_proj at each step."""
        return self.w_key(key)

    def forward(self, query, key, value, mask=None, key_proj=None):
        return F.additive_attention(query, key, value, self.w_query.weight, self.w_key.weight, self.v, mask,
                                    key_proj)


class KVCache:
    """Keys and values (B, Hkv, T, head_dim) of every token decoded so far, for one attention layer."""

    def __init__(self):
        self.key = self.value = None

    def __len__(self):
        return 0 if self.key is None else self.key.shape[-2]

    def append(self, key, value):
        """Add the new tokens' keys and values; returns all keys and values so far."""
        if self.key is None:
            self.key, self.value = key, value
        else:
            self.key, self.value = ops.cat([self.key, key], dim=-2), ops.cat([self.value, value], dim=-2)
        return self.key, self.value


def combine_masks(batch, query_len, key_len, is_causal, key_padding_mask, attn_mask, xp):
    """One mask for F.scaled_dot_product_attention from the module's three ways of masking, or None.

    Boolean unless attn_mask is a float mask, in which case masked places become -inf in it.
    """
    keep = None
    if is_causal:
        keep = F.causal_mask(query_len, key_len, xp, offset=key_len - query_len)       # aligned to the end
    if key_padding_mask is not None:
        pad = as_array(key_padding_mask)
        if pad.dtype != bool:
            raise TypeError(f"key_padding_mask must be boolean (True = padding), got dtype {pad.dtype}")
        if tuple(pad.shape) != (batch, key_len):
            raise RuntimeError(f"key_padding_mask must have shape (batch, key length) = {(batch, key_len)}, got "
                               f"{tuple(pad.shape)}")
        not_pad = ~pad[:, None, None, :]                                             # (B, 1, 1, S)
        keep = not_pad if keep is None else keep & not_pad
    if attn_mask is None:
        return None if keep is None else Tensor(keep)
    if not isinstance(attn_mask, Tensor):
        attn_mask = Tensor(attn_mask)
    if keep is None:
        return attn_mask
    if attn_mask.dtype == bool:
        return Tensor(keep & attn_mask.array)
    return ops.masked_fill(attn_mask, ~keep, float("-inf"))                        # broadcasts to keep's shape


IMPLS = ("sdpa", "flash", "reference")
# Earlier names of the implementations, still accepted: "naive" ran F.scaled_dot_product_attention's fast path, not
# the textbook one (that is "reference").
IMPL_ALIASES = {"naive": "sdpa"}


def check_impl(impl):
    """The attention implementation a module runs, by the function it calls (Hugging Face's attn_implementation
    names them so too): "sdpa" (F.scaled_dot_product_attention, which keeps its weights, formed in parts on the
    CPU), "flash" (F.flash_attention, no weights formed) or "reference" (scaled dot-product attention's reference
    twin, the whole score matrix at once). "naive", the old name of "sdpa", is taken as "sdpa"."""
    impl = IMPL_ALIASES.get(impl, impl)
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    return impl


class AttentionWithPoints(Module):
    """What the attention modules that tools can see inside share (this file's Attention and PyTorch's
    nn.MultiheadAttention): their activation points, last_weights, and out_proj taken head by head.

    Activation points (nn.HookPoint, for tinyattn.interpret): hook_q, hook_k, hook_v (B, heads, T, head_dim), after
    the rotary embedding, k and v before a KV cache joins them; hook_attn_scores (B, H, L, S), scaled and masked
    (-inf), before the softmax; hook_pattern (B, H, L, S), the softmax weights; hook_z (B, L, H, head_dim), each
    head's output before out_proj; hook_result (B, L, H, d_model), each head's output through its slice of out_proj
    (the heads' results plus out_proj's bias sum to the module's output), formed only while hooked.

    The weights leave by hook_pattern only: need_weights=True hooks it for that call (hook_pattern.keeping), and
    last_weights is what it kept there.
    """
    POINTS = ("q", "k", "v", "attn_scores", "pattern", "z", "result")

    def __init__(self):
        super().__init__()
        add_points(self, *self.POINTS)

    @property
    def last_weights(self):
        """The (B, H, L, S) weights, before dropout, that hook_pattern passed in the last forward that asked for them
        (need_weights=True); None before any."""
        return self.hook_pattern.kept

    def _out_proj_by_head(self, z):
        """out_proj(z) for the heads' outputs z (B, L, H, head_dim); while hook_result is hooked, head by head."""
        b, length, heads, head_dim = z.shape
        if not self.hook_result.hooked:
            return self.out_proj(z.reshape(b, length, heads * head_dim))
        # out_proj is linear: head h's share is its z through out_proj's columns for head h (bias added once)
        w = self.out_proj.weight.reshape(-1, heads, head_dim).permute(1, 2, 0)
        result = self.hook_result((z.unsqueeze(-2) @ w).squeeze(-2))          # (B, L, H, d_model)
        out = result.sum(dim=2)
        return out if self.out_proj.bias is None else out + self.out_proj.bias


class Attention(AttentionWithPoints):
    """tinyattn's multi-head attention (Vaswani et al. 2017), the one its models use, with grouped-query
    (num_kv_heads < num_heads) and multi-query (num_kv_heads = 1) variants. (PyTorch's class, its arguments and its
    weights' layout are nn.MultiheadAttention, multihead_attention.py.)

    Self-attention projects q, k and v with one fused Linear (qkv); cross=True projects queries from x and keys and
    values from a context of size kv_dim. impl (check_impl) picks the function that attends: "sdpa" (the default)
    F.scaled_dot_product_attention, "flash" F.flash_attention (no attention dropout), "reference" the reference twin
    of F.scaled_dot_product_attention. Its activation points and last_weights: AttentionWithPoints. While the
    scores or the pattern are hooked (need_weights=True hooks the pattern) the module forms them in the open,
    whatever its impl, so what a hook changes is what the heads read.
    """

    def __init__(self, d_model, num_heads, num_kv_heads=None, bias=True, dropout=0.0, impl="sdpa", cross=False,
                 kv_dim=None, rotary=None):
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads {num_heads} is not divisible by num_kv_heads {num_kv_heads}")
        impl = check_impl(impl)
        if impl == "flash" and dropout:
            raise ValueError("impl='flash' has no attention dropout; use dropout=0 or impl='sdpa'")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.dropout, self.impl, self.cross = dropout, impl, cross
        kv_width = 2 * num_kv_heads * self.head_dim
        if cross:
            self.q_proj = Linear(d_model, d_model, bias)
            self.kv_proj = Linear(kv_dim or d_model, kv_width, bias)
        else:
            self.qkv = Linear(d_model, d_model + kv_width, bias)
        self.out_proj = Linear(d_model, d_model, bias)
        self.rotary = rotary

    def _heads(self, x, heads):
        b, t, _ = x.shape
        return x.reshape(b, t, heads, self.head_dim).transpose(1, 2)          # (B, heads, T, head_dim)

    def forward(self, x, context=None, is_causal=False, key_padding_mask=None, attn_mask=None, need_weights=False,
                cache=None, position_ids=None):
        """x (B, L, d_model); context (B, S, kv_dim) for cross-attention. cache: a KVCache to read and extend.
        position_ids (L,) or (B, L): the queries' positions for the rotary embedding (default: after the cache's).

        Any leading batch dims (..., L, d_model), none included (one sequence), as F.scaled_dot_product_attention
        takes them: they are flattened into one batch dim B around the computation (what the hook points and a
        KVCache see), and key_padding_mask (..., S), position_ids (..., L) and an attn_mask's dims before its
        (heads, L, S) come with them."""
        if self.cross != (context is not None):
            raise ValueError("cross-attention needs a context and self-attention must not get one "
                             f"(cross={self.cross}, context given: {context is not None})")
        if x.ndim < 2 or x.shape[-1] != self.d_model:
            raise ValueError(f"{type(self).__name__} expects x of shape (..., length, d_model={self.d_model}), got "
                             f"{x.shape}")
        if x.ndim != 3:
            return self._batch_flattened(x, context, is_causal, key_padding_mask, attn_mask, need_weights, cache,
                                         position_ids)
        b, length, _ = x.shape
        kv_size = self.num_kv_heads * self.head_dim
        if self.cross:
            q = self.q_proj(x)
            k, v = self.kv_proj(context).split(kv_size, dim=-1)
        else:
            q, k, v = self.qkv(x).split([self.d_model, kv_size, kv_size], dim=-1)
        q, k, v = (self._heads(t, heads) for t, heads in ((q, self.num_heads), (k, self.num_kv_heads),
                                                           (v, self.num_kv_heads)))
        offset = len(cache) if cache is not None else 0
        if self.rotary is not None:
            q, k = (self.rotary(t, offset if position_ids is None else 0, position_ids) for t in (q, k))
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if cache is not None:
            k, v = cache.append(k, v)
        key_len = k.shape[-2]
        xp = backend.xp_of(x.array)
        # Causal self-attention over a whole sequence with no other mask passes is_causal on (flash then skips whole
        # blocks); otherwise the causal mask, aligned to the end of the keys, joins the others in the one mask passed.
        folded = is_causal and (key_len != length or key_padding_mask is not None or attn_mask is not None)
        mask = combine_masks(b, length, key_len, folded and length > 1, key_padding_mask, attn_mask, xp)
        is_causal = is_causal and not folded
        gqa = self.num_kv_heads != self.num_heads
        with self.hook_pattern.keeping(need_weights):
            if self.hook_attn_scores.hooked or self.hook_pattern.hooked:
                with one_blas_thread():        # as the fused paths: one BLAS thread (its others wait on busy cores)
                    out = self._attention_in_the_open(q, k, v, mask, is_causal)
            elif self.impl == "flash":
                out = F.flash_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=gqa)
            else:
                with F.reference() if self.impl == "reference" else contextlib.nullcontext():
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                         dropout_p=self.dropout if self.training else 0.0,
                                                         enable_gqa=gqa)
        return self._out_proj_by_head(self.hook_z(out.transpose(1, 2)))          # z: (B, L, H, head_dim)

    def _batch_flattened(self, x, context, is_causal, key_padding_mask, attn_mask, need_weights, cache,
                         position_ids):
        """forward for x (..., L, d_model) other than (B, L, d_model): its leading dims, and those of the inputs
        that come with them, as one batch dim (a view where the layout allows), and back again after."""
        lead, length = tuple(x.shape[:-2]), x.shape[-2]
        batch = math.prod(lead)

        def flat(name, t, tail):                 # t (*lead, *tail) -> (batch, *tail); None stays None
            if t is None:
                return None
            shape = tuple(t.shape)
            if shape[:len(shape) - tail] != lead:
                raise ValueError(f"{type(self).__name__}: x of shape {tuple(x.shape)} needs {name} with the same "
                                 f"leading dims {lead}, got {name} of shape {shape}")
            return t.reshape((batch,) + shape[len(shape) - tail:])

        if attn_mask is not None and attn_mask.ndim > 3:          # its batch dims, broadcast to x's, then flattened
            try:
                fits = backend.broadcast_shapes(tuple(attn_mask.shape[:-3]), lead) == lead
            except ValueError:
                fits = False
            if not fits:
                raise ValueError(f"{type(self).__name__}: attn_mask of shape {tuple(attn_mask.shape)} has batch dims "
                                 f"that do not broadcast to x's leading dims {lead} (x {tuple(x.shape)})")
            attn_mask = attn_mask if isinstance(attn_mask, Tensor) else Tensor(attn_mask)
            attn_mask = flat("attn_mask", ops.broadcast_to(attn_mask, lead + tuple(attn_mask.shape[-3:])), 3)
        if position_ids is not None and as_array(position_ids).ndim > 1:
            position_ids = flat("position_ids", as_array(position_ids), 1)
        out = self.forward(flat("x", x, 2), flat("context", context, 2), is_causal,
                           flat("key_padding_mask", key_padding_mask, 1), attn_mask, need_weights, cache,
                           position_ids)
        if need_weights:                                          # the weights kept, with x's leading dims
            self.hook_pattern.kept = self.last_weights.reshape(lead + tuple(self.last_weights.shape[1:]))
        return out.reshape(lead + (length, self.d_model))

    def _attention_in_the_open(self, q, k, v, mask, is_causal):
        """Scaled dot-product attention written out through hook_attn_scores and hook_pattern."""
        groups = self.num_heads // self.num_kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = (q * (1.0 / math.sqrt(self.head_dim))) @ k.transpose(-2, -1)   # scaled first, as F's attention
        if is_causal:
            mask = Tensor(F.causal_mask(q.shape[-2], k.shape[-2], backend.xp_of(q.array)))
        if mask is not None:
            scores = ops.masked_fill(scores, ~mask.array, float("-inf")) if mask.dtype == bool else scores + mask
        scores = self.hook_attn_scores(scores)
        pattern = self.hook_pattern(F.softmax(scores, dim=-1))     # a row with every key masked gives 0, not NaN
        return F.dropout(pattern, self.dropout, self.training) @ v

    def kv_cache_bytes_per_token(self, dtype_bytes=4):
        """Bytes a KV cache holds per token for this layer: keys and values for num_kv_heads heads."""
        return 2 * self.num_kv_heads * self.head_dim * dtype_bytes

    def extra_repr(self):
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"impl={self.impl!r}")


# The class's name until 2026-11-29, one capital away from PyTorch's nn.MultiheadAttention; it still imports.
MultiHeadAttention = Attention


# -- attention inside a CNN ---------------------------------------------------------------------------
class SelfAttention2d(Module):
    """Self-attention over the positions of a (B, C, H, W) feature map, added back through a learned gate gamma
    that starts at 0 (SAGAN, Zhang et al. 2019): the block begins as the identity and learns how much to attend."""

    def __init__(self, channels, num_heads=1):
        super().__init__()
        self.attention = Attention(channels, num_heads)
        self.gamma = Parameter(zeros(1))

    def forward(self, x, need_weights=False):
        b, c, h, w = x.shape
        tokens = x.reshape(b, c, h * w).transpose(1, 2)                           # (B, HW, C)
        attended = self.attention(tokens, need_weights=need_weights)
        return x + self.gamma * attended.transpose(1, 2).reshape(b, c, h, w)
