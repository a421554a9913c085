"""Solution · single-head attention, forward and backward (lesson 03)."""
from tinyattn import Function
from tinyattn.backend import xp_of

from lessons.exercises.given import dropout_scale


class Attention(Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p, enable_gqa):
        if enable_gqa:
            raise ValueError("this attention has no grouped heads: query heads sharing key/value heads are exercise "
                             "grouped_query (lessons/exercises/grouped_query.py)")
        xp = xp_of(q)
        s = scale * (q @ xp.swapaxes(k, -1, -2))
        if mask is not None and mask.dtype == bool:
            s = xp.where(mask, s, xp.asarray(-xp.inf, dtype=s.dtype))
        elif mask is not None:
            s = s + mask
        row_max = s.max(axis=-1, keepdims=True)
        e = xp.exp(s - xp.where(xp.isfinite(row_max), row_max, 0))     # every key masked: row_max -inf, e = 0
        total = e.sum(axis=-1, keepdims=True)
        p = e / xp.where(total == 0, 1, total)
        drop = dropout_scale(p.shape, dropout_p, q) if dropout_p else 1.0   # P' = P * D
        ctx.save_for_backward(q, k, v, p, drop)
        ctx.scale = scale
        return (p * drop) @ v

    @staticmethod
    def backward(ctx, grad):
        q, k, v, p, drop = ctx.saved_tensors
        xp = xp_of(grad)
        grad_v = xp.swapaxes(p * drop, -1, -2) @ grad                        # O = P' V
        grad_p = (grad @ xp.swapaxes(v, -1, -2)) * drop                      # P' = P * D
        grad_s = p * (grad_p - (grad_p * p).sum(axis=-1, keepdims=True))     # through each row's softmax
        grad_q = ctx.scale * (grad_s @ k)                                    # S = scale Q K^T (+ mask)
        grad_k = ctx.scale * (xp.swapaxes(grad_s, -1, -2) @ q)
        grad_mask = grad_s if ctx.needs_input_grad[3] else None
        return grad_q, grad_k, grad_v, grad_mask, None, None, None
