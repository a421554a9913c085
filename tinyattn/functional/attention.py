"""Scaled dot-product attention, softmax(q k^T * scale + mask) v, exactly as PyTorch defines it.

ReferenceScaledDotProductAttention is the math on one screen; lesson 03 derives its backward. The fast version is the
same math arranged for speed: in place on its score matrix, its work cut into parts for the CPU threads.
attention_weights computes the weights in a pass of their own, for plots.
"""
from .. import cpu
from ..backend import broadcast_shapes, xp_of
from ..ops import require_float
from ..tensor import Function, Tensor, as_array
from . import twins
from .attention_inputs import (additive_mask, attention_mask, check_attention_inputs, default_scale, group_heads,
                               merge_heads, split_heads, ungroup_grad, with_row_and_key_axes)
from .dropout import keep_mask
from .softmax import softmax_array, softmax_in_place


def _probabilities(q, k, mask, scale):
    """P = softmax(scale * q k^T + mask) over the keys; a row with every key masked gives zeros."""
    scores = (q * scale) @ xp_of(q).swapaxes(k, -1, -2)   # scaled first: float16 q k^T can overflow before it
    if mask is not None:
        scores = scores + additive_mask(mask, q.dtype)
    return softmax_array(scores, -1)


class ReferenceScaledDotProductAttention(Function):
    """O = P' V, P' = P * keep / (1 - p) (dropout), P = softmax(S), S = scale * Q K^T + mask.

    Backward, from the chain rule: dV = P'^T dO; dP' = dO V^T and dP = dP' * keep / (1 - p); through the softmax
    of each row, dS = P * (dP - rowsum(dP * P)); then dQ = scale * dS K, dK = scale * dS^T Q, and a float mask,
    added to S, gets dS itself. Grouped heads (GQA): each key/value head sums the gradients of its query heads.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p, enable_gqa):
        q, k, v, mask, groups = group_heads(q, k, v, mask, enable_gqa)
        p = _probabilities(q, k, mask, scale)
        keep = keep_mask(p.shape, dropout_p, q).astype(q.dtype) * (1.0 / (1.0 - dropout_p)) if dropout_p else 1.0
        ctx.save_for_backward(q, k, v, p, keep)
        ctx.scale, ctx.groups = scale, groups
        return merge_heads((p * keep) @ v, groups)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, p, keep = ctx.saved_tensors
        xp = xp_of(grad)
        grad = split_heads(grad, ctx.groups)
        grad_v = xp.swapaxes(p * keep, -1, -2) @ grad
        grad_p = (grad @ xp.swapaxes(v, -1, -2)) * keep
        grad_s = p * (grad_p - (grad_p * p).sum(axis=-1, keepdims=True))
        grad_q = ctx.scale * (grad_s @ k)
        grad_k = ctx.scale * (xp.swapaxes(grad_s, -1, -2) @ q)
        grad_mask = merge_heads(grad_s, ctx.groups) if ctx.needs_input_grad[3] else None
        return (merge_heads(grad_q, ctx.groups), ungroup_grad(grad_k, ctx.groups), ungroup_grad(grad_v, ctx.groups),
                grad_mask, None, None, None)


@cpu.tuned
class FastScaledDotProductAttention(Function):
    """The same math in place on the scores, each part of the batch (or of the query rows) on a CPU thread with a
    score array of its own: one array for all of them would often be over 32 MiB, and glibc gives arrays that
    large fresh pages from the OS on every call. A part leaves out the keys a boolean mask hides from all its query
    rows (under a causal mask, 3/4 of the scores at T=128, approaching half for long sequences:
    cpu.attention_parts). The backward uses rowsum(dP * P) = rowsum(dO * O) (FlashAttention's identity, dropout
    included): a sum over Ev values per row instead of over S."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p, enable_gqa):
        xp = xp_of(q)
        q, k, v, mask, groups = group_heads(q, k, v, mask, enable_gqa)
        batch, n_rows, n_keys = broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2]
        out = cpu.laid_out_like(q, batch + (n_rows, v.shape[-1]), q.dtype)     # as q is, often (B, T, H, E)
        keep = keep_mask(batch + (n_rows, n_keys), dropout_p, q) if dropout_p > 0 else None

        def attend(part):                                    # P = softmax(scale q k^T + mask), O = P V
            p = part.queries(q) * scale @ xp.swapaxes(part.keys(k), -1, -2)
            bias = additive_mask(part.scores(mask), q.dtype)
            if bias is not None:
                p += bias
            softmax_in_place(p)
            dropped = p if keep is None else p * part.scores(keep) * (1.0 / (1.0 - dropout_p))
            xp.matmul(dropped, part.keys(v), out=part.queries(out))
            return p
        ctx.parts = cpu.attention_parts(batch, n_rows, n_keys, q, mask)
        probs = cpu.for_each_part(attend, ctx.parts)
        ctx.save_for_backward(q, k, v, keep, out, *probs)
        ctx.scale, ctx.dropout_p, ctx.groups = scale, dropout_p, groups
        return merge_heads(out, groups)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, keep, out, *probs = ctx.saved_tensors
        xp = xp_of(grad)
        grad = grad.reshape(out.shape)
        grad_q = cpu.laid_out_like(q, out.shape[:-1] + q.shape[-1:], q.dtype)      # the product writes it as q is
        grad_mask = xp.empty(out.shape[:-1] + k.shape[-2:-1], dtype=q.dtype) if ctx.needs_input_grad[3] else None

        def attend_backward(part_and_p, sums):              # sums: dK and dV, this thread's or its entries'
            part, p = part_and_p
            grad_k, grad_v = sums
            g = part.queries(grad)
            dropped = p if keep is None else p * part.scores(keep) * (1.0 / (1.0 - ctx.dropout_p))
            part.keys(grad_v)[...] += xp.swapaxes(dropped, -1, -2) @ g
            grad_s = g @ xp.swapaxes(part.keys(v), -1, -2)          # dP, made dS in place
            if keep is not None:
                grad_s *= part.scores(keep)
                grad_s *= 1.0 / (1.0 - ctx.dropout_p)
            grad_s -= cpu.last_axis_sum(g * part.queries(out))
            grad_s *= p
            xp.matmul(grad_s, part.keys(k), out=part.queries(grad_q))
            part.keys(grad_k)[...] += xp.swapaxes(grad_s, -1, -2) @ part.queries(q)
            if grad_mask is not None:                       # a float mask: every part sees every key
                part.queries(grad_mask)[...] = grad_s

        def zero_sums():
            return (xp.zeros(out.shape[:-2] + k.shape[-2:], dtype=q.dtype),
                    xp.zeros(out.shape[:-2] + v.shape[-2:], dtype=q.dtype))
        grad_k, grad_v = cpu.sum_over_parts(attend_backward, list(zip(ctx.parts, probs)), zero_sums,
                                            group=lambda part_and_p: part_and_p[0].batch_entries)
        grad_q *= ctx.scale
        # dK is laid out as k is by the pass that scales it (summing part by part into that layout costs more than the
        # copy it saves; for dV, which has no such pass, so does a copy: dV keeps the usual order)
        grad_k = xp.multiply(grad_k, ctx.scale, out=cpu.laid_out_like(k, grad_k.shape, q.dtype))
        grad_mask = None if grad_mask is None else merge_heads(grad_mask, ctx.groups)
        return (merge_heads(grad_q, ctx.groups), ungroup_grad(grad_k, ctx.groups), ungroup_grad(grad_v, ctx.groups),
                grad_mask, None, None, None)


twins.register("scaled_dot_product_attention", FastScaledDotProductAttention, ReferenceScaledDotProductAttention)


def _checked_mask(query, key, value, attn_mask, is_causal, enable_gqa, caller):
    """The mask attention applies (a bool array, a float tensor or None), after checking every input's shape."""
    check_attention_inputs(query, key, value, attn_mask, enable_gqa, caller)
    mask = with_row_and_key_axes(attention_mask(attn_mask, is_causal, query.shape[-2], key.shape[-2], query.array))
    return mask.array if isinstance(mask, Tensor) and mask.dtype == bool else mask


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(q k^T * scale + mask) v, as torch.nn.functional.scaled_dot_product_attention.

    query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev). attn_mask broadcasts to (..., Hq, L, S):
    boolean True means "may attend", a float mask is added to the scores (and gets a gradient if it requires one).
    is_causal masks j > i (top-left aligned, as PyTorch). scale defaults to 1/sqrt(E). enable_gqa lets Hq be a
    multiple of Hkv. A query row with every key masked gives output 0 and gradient 0, never NaN.
    """
    if not 0 <= dropout_p <= 1:
        raise RuntimeError(f"scaled_dot_product_attention: dropout probability has to be between 0 and 1, but got "
                           f"{dropout_p}")
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_float(x, f"scaled_dot_product_attention's {name}")
    mask = _checked_mask(query, key, value, attn_mask, is_causal, enable_gqa, "scaled_dot_product_attention")
    attention = twins.implementation("scaled_dot_product_attention")
    return attention.apply(query, key, value, mask, default_scale(query, scale), float(dropout_p), enable_gqa)


def one_blas_thread():
    """`with one_blas_thread():` BLAS runs on one thread inside, as inside the fast Functions (cpu.tuned), for attention
    made of plain products (attention_weights; a module's path through its hook points): its products round as
    theirs do, and BLAS's other threads do not wait on cores tinyattn's threads keep busy."""
    return cpu.blas_held()


def attention_weights(query, key, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The (..., Hq, L, S) softmax weights of scaled_dot_product_attention, in a pass of their own, for plots (no
    graph is recorded)."""
    mask = as_array(_checked_mask(query, key, key, attn_mask, is_causal, enable_gqa, "attention_weights"))
    q, k, _, mask, groups = group_heads(query.array, key.array, key.array, mask, enable_gqa)
    with one_blas_thread():
        return Tensor(merge_heads(_probabilities(q, k, mask, default_scale(query, scale)), groups))
