"""Solution · grouped-query attention: query heads sharing key/value heads (lesson 07)."""
from tinyattn import Function
from tinyattn.backend import xp_of

from lessons.exercises.given import attend, attend_backward


class GroupedQueryAttention(Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p, enable_gqa):
        if dropout_p:
            raise ValueError(f"this attention has no dropout, and the model asked for dropout_p={dropout_p}: run it "
                             "in eval mode (model.eval()) or build it with dropout 0.0 while it runs on yours "
                             "(exercise attention has dropout)")
        xp = xp_of(q)
        query_heads, kv_heads = q.shape[-3], k.shape[-3]
        if query_heads % kv_heads or (query_heads != kv_heads and not enable_gqa):
            raise ValueError(f"{query_heads} query heads cannot share {kv_heads} key/value heads")
        group = query_heads // kv_heads
        # Query head h reads key/value head h // group: put the heads of a group on an axis of their own, and give
        # k and v an axis of size 1 there, which broadcasts instead of copying them group times.
        if mask is not None:
            mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)               # as many dims as the scores
            heads = (kv_heads, group) if mask.shape[-3] == query_heads else (1, 1)
            mask = mask.reshape(mask.shape[:-3] + heads + mask.shape[-2:])
        q = q.reshape(q.shape[:-3] + (kv_heads, group) + q.shape[-2:])
        k, v = xp.expand_dims(k, -3), xp.expand_dims(v, -3)
        out, p = attend(q, k, v, mask, scale)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return out.reshape(out.shape[:-4] + (query_heads,) + out.shape[-2:])

    @staticmethod
    def backward(ctx, grad):
        q, k, v, p = ctx.saved_tensors
        grad = grad.reshape(grad.shape[:-3] + q.shape[-4:-2] + grad.shape[-2:])        # the grouped layout
        grad_q, grad_k, grad_v, grad_s = attend_backward(q, k, v, p, grad, ctx.scale)
        merge = lambda x: x.reshape(x.shape[:-4] + (-1,) + x.shape[-2:])              # (.., Hkv, G, ..) -> (.., Hq, ..)
        # Every query head of a group read the same k and v, so their gradients add up over the group.
        grad_mask = merge(grad_s) if ctx.needs_input_grad[3] else None
        return merge(grad_q), grad_k.sum(axis=-3), grad_v.sum(axis=-3), grad_mask, None, None, None
