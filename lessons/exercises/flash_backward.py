"""Exercise · flash attention's backward.               Lesson 04, "Blockwise attention, by hand: backward".

The library's forward (given) saved only Q, K, V, O and each row's log-sum-exp L, never the N x M matrix P. Write
the backward that rebuilds P block by block and accumulates dQ, dK and dV.

Shapes (the forward left them in the grouped layout: q is (..., Hkv, G, N, E) for grouped-query attention, and
k, v (..., Hkv, 1, M, E) broadcast over the group)
    q (..., N, E), k (..., M, E), v (..., M, Ev), out (..., N, Ev), L (..., N, 1), grad = dO like out.
    dK and dV first get one slice per query head (out's leading dims), summed over each group at the end
    (given ungroup_grad does it).

The math to derive
    Lesson 03's backward is dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = scale dS K,
    dK = scale dS^T Q. Make it blockwise:
    1. Why does P = exp(S - L) give every block of P exactly, using only the block's S?
    2. rowsum(dP * P) needs whole rows of P. Show that it equals D = rowsum(dO * O), one number per query,
       computed before the loops.
    3. Then for every column block j and every row block i that may see it:
       dVj += P^T dOi,  dP = dOi Vj^T,  dS = P * (dP - Di),  dQi += scale dS Kj,  dKj += scale dS^T Qi.

What the checker holds you to
    a row with every key masked has L = +inf, so its P is 0 and so are its gradients (no NaN); causal blocks that
    a row block may not see are skipped (given visible); ragged blocks; grouped heads.

Check it:    python -m lessons check flash_backward
Plug it in:  F.use(flash_attention=FlashAttention); models with impl="flash" then train on yours.
"""
from tinyattn import Function
from tinyattn.backend import xp_of
from tinyattn.functional.attention_inputs import merge_heads, split_heads, ungroup_grad
from tinyattn.functional.flash_attention import ReferenceFlashAttention

from lessons.exercises.given import block_scores, blocks, trace, visible


class FlashAttention(Function):
    forward = staticmethod(ReferenceFlashAttention.forward)                # given (exercise flash_forward)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, L, mask = ctx.saved_tensors
        scale, is_causal, block_size, groups = ctx.options
        xp = xp_of(grad)
        grad = split_heads(grad, groups)                                   # given: dO in the grouped layout
        # TODO: D; grad_q like q broadcast to out's leading dims, grad_k and grad_v with out's leading dims
        #       (xp.zeros(out.shape[:-2] + k.shape[-2:], dtype=q.dtype)); the two loops over
        #       blocks(k.shape[-2], block_size) and blocks(q.shape[-2], block_size), skipping what
        #       visible(rows, cols, is_causal) rules out, with block_scores(q, k, mask, rows, cols, scale, is_causal).
        #       Optional: end each block step with trace(p, grad_s) (P and dS of the block); the checker then shows
        #       yours beside the library's at the first tile where they differ.
        #       Return (merge_heads(grad_q, groups), ungroup_grad(grad_k, groups), ungroup_grad(grad_v, groups),
        #       None, None, None, None, None).
        raise NotImplementedError("not implemented yet")
