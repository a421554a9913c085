"""Exercise · grouped-query attention: query heads that share key/value heads.  Lesson 07 (GQA / MQA).

With Hq query heads and Hkv < Hq key/value heads, query head h reads key/value head h // G, G = Hq / Hkv (MQA:
Hkv = 1). The KV cache shrinks by G. Write the head sharing around the attention math, which is given (attend and
attend_backward: lesson 03's, broadcasting over leading dims). Do not copy K and V G times: let them broadcast.

Shapes
    q (..., Hq, L, E), k (..., Hkv, S, E), v (..., Hkv, S, Ev); output (..., Hq, L, Ev).
    mask: None, or broadcasting to (..., Hq, L, S) (boolean: True = may attend; float: added, and it needs a
    gradient when ctx.needs_input_grad[3]). Its head dim, when it has one of size Hq, must follow the queries.
    enable_gqa: False means Hq must equal Hkv (as PyTorch).

What to work out
    1. A layout in which query head h = g_kv * G + g meets key/value head g_kv by broadcasting alone: reshape q to
       (..., Hkv, G, L, E) and give k and v a size-1 axis in the same place.
    2. The same view for a mask with a head dim of Hq (and one for a mask without it).
    3. Backward: attend_backward gives dK and dV with one slice per query head of a group. Why is k's gradient
       their sum over the group? Which axis is that? And dQ back to (..., Hq, L, E).

Check it:    python -m lessons check grouped_query
Plug it in:  F.use(scaled_dot_product_attention=GroupedQueryAttention); GPTConfig(num_kv_heads=1) then runs yours.
"""
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
        # TODO: check the head counts (a ValueError when they cannot be shared); the grouped views of q, k, v
        #       and mask; out, p = attend(q, k, v, mask, scale); save what backward needs; return out with its
        #       heads merged back to (..., Hq, L, Ev).
        raise NotImplementedError("not implemented yet")

    @staticmethod
    def backward(ctx, grad):
        # TODO: grad to the grouped layout; grad_q, grad_k, grad_v, grad_s = attend_backward(q, k, v, p, grad, scale);
        #       merge or sum each back to its input's layout. Return (dQ, dK, dV, d_mask or None, None, None, None).
        raise NotImplementedError("not implemented yet")
