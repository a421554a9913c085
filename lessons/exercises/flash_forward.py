"""Exercise · flash attention's forward.                 Lesson 04, "Blockwise attention, by hand: forward".

The same output as softmax(scale Q K^T + mask) V without ever holding the N x M scores: walk the keys block by
block with the online softmax (exercise online_softmax), carrying an unnormalised output along. Your forward runs
with the library's backward, which rebuilds every block of P from what you save: O and each row's log-sum-exp L.

Shapes (given code below has already grouped the heads: q is (..., Hkv, G, N, E) for grouped-query attention)
    q (..., N, E), k (..., M, E), v (..., M, Ev) with leading dims that broadcast; out (..., N, Ev); L (..., N, 1).
    mask: None or an array broadcasting to the scores (given block_scores applies it); is_causal: key j <= query i.
    block_size: rows and columns per block; it need not divide N or M.

The algorithm (FlashAttention-2), for each row block Qi
    m = -inf, l = 0, acc = 0 (shapes (..., rows, 1), (..., rows, 1), (..., rows, Ev))
    for each column block Kj, Vj it may see:  S = block_scores(...)
        m_new = max(m, rowmax S);  P = exp(S - m_new);  alpha = exp(m - m_new)
        l = alpha l + rowsum P;  acc = alpha acc + P Vj;  m = m_new
    Oi = acc / l;  Li = m + log l
    Derive why alpha rescales both l and acc, and why Li is all that backward needs to rebuild P = exp(S - Li).

What the checker holds you to
    - a row that has seen only masked keys so far has m = -inf: shift by 0 there, never -inf - (-inf) = NaN;
    - a row whose every key is masked ends with l = 0: its output is 0 and its L is +inf (so backward's P is 0);
    - ragged blocks, causal masks, padding masks, grouped heads: the comparison runs them all.

Check it:    python -m lessons check flash_forward
Plug it in:  F.use(flash_attention=FlashAttention); models with impl="flash" then run yours.
"""
from tinyattn import Function
from tinyattn.backend import xp_of
from tinyattn.functional.attention_inputs import group_heads, merge_heads
from tinyattn.functional.flash_attention import ReferenceFlashAttention

from lessons.exercises.given import block_scores, blocks, trace, visible


class FlashAttention(Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, block_size):
        xp = xp_of(q)
        q, k, v, mask, groups = group_heads(q, k, v, mask, enable_gqa)     # given: grouped heads as a batch dim
        batch = xp.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        out = xp.zeros(batch + (q.shape[-2], v.shape[-1]), dtype=q.dtype)
        L = xp.zeros(batch + (q.shape[-2], 1), dtype=q.dtype)
        for rows in blocks(q.shape[-2], block_size):
            # TODO: m, l, acc for this row block; for every column block in blocks(k.shape[-2], block_size) that
            #       visible(rows, cols, is_causal) allows, s = block_scores(q, k, mask, rows, cols, scale, is_causal)
            #       and the online update, ending each block step with trace(m, l, acc) (optional: where you
            #       call it, the checker shows your m, l and acc beside the library's at the first tile where they
            #       differ); then fill out[..., rows, :] and L[..., rows, :].
            raise NotImplementedError("not implemented yet")
        ctx.save_for_backward(q, k, v, out, L, mask)                       # what the library's backward reads
        ctx.options = (scale, is_causal, block_size, groups)
        return merge_heads(out, groups)

    backward = staticmethod(ReferenceFlashAttention.backward)             # given (exercise flash_backward)
