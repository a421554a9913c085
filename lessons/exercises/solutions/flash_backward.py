"""Solution · flash attention's backward (lesson 04)."""
from tinyattn import Function
from tinyattn.backend import xp_of
from tinyattn.functional.attention_inputs import merge_heads, split_heads, ungroup_grad
from tinyattn.functional.flash_attention import ReferenceFlashAttention

from lessons.exercises.given import block_scores, blocks, trace, visible


class FlashAttention(Function):
    forward = staticmethod(ReferenceFlashAttention.forward)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, L, mask = ctx.saved_tensors
        scale, is_causal, block_size, groups = ctx.options
        xp = xp_of(grad)
        grad = split_heads(grad, groups)
        D = (grad * out).sum(axis=-1, keepdims=True)            # rowsum(dO * O) = rowsum(dP * P), one per query
        grad_q = xp.zeros(out.shape[:-1] + q.shape[-1:], dtype=q.dtype)
        grad_k = xp.zeros(out.shape[:-2] + k.shape[-2:], dtype=q.dtype)
        grad_v = xp.zeros(out.shape[:-2] + v.shape[-2:], dtype=q.dtype)
        for cols in blocks(k.shape[-2], block_size):
            for rows in blocks(q.shape[-2], block_size):
                if not visible(rows, cols, is_causal):
                    continue
                p = xp.exp(block_scores(q, k, mask, rows, cols, scale, is_causal) - L[..., rows, :])   # exact P
                grad_v[..., cols, :] += xp.swapaxes(p, -1, -2) @ grad[..., rows, :]
                grad_p = grad[..., rows, :] @ xp.swapaxes(v[..., cols, :], -1, -2)
                grad_s = p * (grad_p - D[..., rows, :])
                trace(p, grad_s)                                    # optional: lets the checker show your loop
                grad_q[..., rows, :] += scale * (grad_s @ k[..., cols, :])
                grad_k[..., cols, :] += scale * (xp.swapaxes(grad_s, -1, -2) @ q[..., rows, :])
        return (merge_heads(grad_q, groups), ungroup_grad(grad_k, groups), ungroup_grad(grad_v, groups),
                None, None, None, None, None)
