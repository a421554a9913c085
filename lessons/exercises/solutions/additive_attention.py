"""Solution · Bahdanau's additive scores, forward and backward (lesson 02)."""
from tinyattn import Function
from tinyattn.backend import xp_of


class AdditiveScores(Function):
    @staticmethod
    def forward(ctx, q_proj, k_proj, v):
        f = xp_of(v).tanh(q_proj[:, :, None, :] + k_proj[:, None, :, :])       # (B, Lq, S, H), every pair (i, j)
        ctx.save_for_backward(f, v)
        return f @ v

    @staticmethod
    def backward(ctx, grad):
        f, v = ctx.saved_tensors
        grad_f = grad[..., None] * v                     # e = f . v
        grad_a = grad_f * (1 - f * f)                    # f = tanh(a), tanh' = 1 - tanh^2
        # a[b, i, j] = q_proj[b, i] + k_proj[b, j]: query i is in every pair (i, j), key j in every pair (i, j).
        return grad_a.sum(axis=2), grad_a.sum(axis=1), (grad[..., None] * f).sum(axis=(0, 1, 2))
