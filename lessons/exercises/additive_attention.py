"""Exercise · Bahdanau's additive attention scores, forward and backward.  Lesson 02 (and 01).

Before writing each word, the decoder scores every encoder state: e_ij = v^T tanh(W_q q_i + W_k k_j) (Bahdanau,
Cho & Bengio 2015). The projections are plain Linear layers; write the fused part, the scores of every pair
(i, j) from the projected queries and keys, as a Function. Softmax and the weighted sum come after it.

Shapes
    q_proj (B, Lq, H) = W_q q; k_proj (B, S, H) = W_k k; v (H,). Scores e (B, Lq, S):
    e[b, i, j] = sum_h v[h] tanh(q_proj[b, i, h] + k_proj[b, j, h]).  (A decoder step has Lq = 1.)

The math to derive
    With f = tanh(a), a[b, i, j] = q_proj[b, i] + k_proj[b, j] (broadcast to (B, Lq, S, H)) and de = dLoss/de:
    1. df, then da (tanh' in terms of f itself).
    2. dq_proj and dk_proj: q_proj[b, i] takes part in a[b, i, j] for every j. Which axis do you sum?
    3. dv: v is shared by every (b, i, j).

What the checker holds you to
    gradients in their inputs' shapes; decoder steps (Lq = 1) and ragged source lengths (the mask is applied after
    your scores, by F.additive_attention); float32 stays float32.

Check it:    python -m lessons check additive_attention
Plug it in:  F.use(additive_scores=AdditiveScores); models.Seq2SeqAttention then trains on yours.
"""
from tinyattn import Function
from tinyattn.backend import xp_of


class AdditiveScores(Function):
    @staticmethod
    def forward(ctx, q_proj, k_proj, v):
        xp = xp_of(v)
        # TODO: f = tanh of every pair's sum, shaped (B, Lq, S, H); save what backward needs; return e.
        raise NotImplementedError("not implemented yet")

    @staticmethod
    def backward(ctx, grad):
        # TODO: return (dq_proj, dk_proj, dv), each in its input's shape.
        raise NotImplementedError("not implemented yet")
