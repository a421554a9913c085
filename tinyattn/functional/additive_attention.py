"""Additive (Bahdanau) attention: score(q, k) = v^T tanh(W_q q + W_k k), softmax over keys, weighted sum of values
(Bahdanau, Cho & Bengio 2015). The scores are one fused Function, with its reference twin; the projections, the
softmax and the weighted sum are the library's own functions."""
from .. import cpu, ops
from ..backend import xp_of
from ..tensor import Function, as_array
from . import twins
from .linear import linear
from .softmax import softmax


class ReferenceAdditiveScores(Function):
    """e[b, i, j] = v . f[b, i, j], f = tanh(q_proj[b, i] + k_proj[b, j]): queries (B, Lq, H), keys (B, S, H).

    Backward: through the dot with v, df = de * v; through tanh, da = df * (1 - f^2); a = q_proj[i] + k_proj[j], so
    dq_proj sums da over the keys j and dk_proj over the queries i; dv sums de * f over b, i and j.
    """

    @staticmethod
    def forward(ctx, q_proj, k_proj, v):
        f = xp_of(v).tanh(q_proj[:, :, None, :] + k_proj[:, None, :, :])        # (B, Lq, S, H)
        ctx.save_for_backward(f, v)
        return f @ v

    @staticmethod
    def backward(ctx, grad):
        f, v = ctx.saved_tensors
        grad_a = grad[..., None] * v * (1 - f * f)
        return grad_a.sum(axis=2), grad_a.sum(axis=1), (grad[..., None] * f).sum(axis=(0, 1, 2))


@cpu.tuned
class FastAdditiveScores(Function):
    """The same, in place on the one (B, Lq, S, H) array; dv as one BLAS product."""

    @staticmethod
    def forward(ctx, q_proj, k_proj, v):
        f = q_proj[:, :, None, :] + k_proj[:, None, :, :]
        xp_of(f).tanh(f, out=f)
        ctx.save_for_backward(f, v)
        return f @ v

    @staticmethod
    def backward(ctx, grad):
        f, v = ctx.saved_tensors
        grad_v = grad.reshape(-1) @ f.reshape(-1, f.shape[-1])
        grad_a = f * f
        xp_of(f).subtract(1, grad_a, out=grad_a)
        grad_a *= v
        grad_a *= grad[..., None]
        return grad_a.sum(axis=2), grad_a.sum(axis=1), grad_v


twins.register("additive_scores", FastAdditiveScores, ReferenceAdditiveScores)


def additive_scores(q_proj, k_proj, v):
    """e[b, i, j] = v^T tanh(q_proj[b, i] + k_proj[b, j]) for q_proj (B, Lq, H), k_proj (B, S, H), v (H,)."""
    return twins.implementation("additive_scores").apply(q_proj, k_proj, v)


def additive_attention(query, key, value, w_query, w_key, v, mask=None, key_proj=None):
    """Bahdanau attention: softmax over keys of v^T tanh(W_q q + W_k k), then the weighted sum of values.

    query (B, Dq) or (B, Lq, Dq); key (B, S, Dk); value (B, S, Dv); w_query (H, Dq), w_key (H, Dk), v (H,).
    mask (B, S) or broadcastable to (B, Lq, S): True = may attend. key_proj lets a decoder pass W_k k, computed once
    per source sentence, instead of recomputing it at every step. Returns (context, weights):
    context (B, [Lq,] Dv), weights (B, [Lq,] S).
    """
    single = query.ndim == 2
    if single:
        query = query.unsqueeze(1)
    if key_proj is None:
        key_proj = linear(key, w_key)                                    # (B, S, H)
    scores = additive_scores(linear(query, w_query), key_proj, v)        # (B, Lq, S)
    if mask is not None:
        mask = as_array(mask)
        keep = mask[:, None, :] if mask.ndim == 2 else mask
        scores = ops.masked_fill(scores, ~keep, float("-inf"))
    weights = softmax(scores, dim=-1)
    context = weights @ value                                           # (B, Lq, Dv)
    if single:
        return context.squeeze(1), weights.squeeze(1)
    return context, weights
