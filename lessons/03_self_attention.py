# %% [markdown]
# # 03 · From an attention layer to multi-head self-attention
#
# Queries, keys and values; why scores are scaled by 1/sqrt(d); masking; multi-head attention as four matrix
# multiplications; why self-attention needs position information. Every piece is written by hand here and then
# checked against the library's version.

# %%
import math

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import nn, viz
from tinyattn.lesson import options, plot_path, report

args = options(__doc__)
rng = np.random.default_rng(args.seed)
tokens = "the cat sat on the mat".split()
d_model, num_heads = 16, 4
x = rng.standard_normal((1, len(tokens), d_model))          # stand-ins for token embeddings, float64

# %% [markdown]
# ## One attention layer by hand
# Each token asks a question (its query q_i = x_i W_q), offers a label (key k_j = x_j W_k) and a payload
# (value v_j = x_j W_v). Token i mixes the values with weights softmax_j(q_i . k_j / sqrt(d)). The softmax subtracts
# each row's largest score before exp: the weights stay the same (exp(-max) cancels between numerator and sum) and
# exp never overflows, whatever the scores.

# %%
w_q, w_k, w_v = (rng.standard_normal((d_model, d_model)) / math.sqrt(d_model) for _ in range(3))
q, k, v = x @ w_q, x @ w_k, x @ w_v
scores = q @ k.transpose(0, 2, 1) / math.sqrt(d_model)
weights = np.exp(scores - scores.max(-1, keepdims=True))
weights /= weights.sum(-1, keepdims=True)
by_hand = weights @ v
library = F.scaled_dot_product_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v)).numpy()
err_single = float(np.abs(by_hand - library).max())
print(f"hand-written vs F.scaled_dot_product_attention: max |difference| = {err_single:.2e}")
assert err_single < 1e-12

# %% [markdown]
# ## Why divide by sqrt(d)?
# For random q and k with unit-variance entries, q . k has variance d. Without scaling, large d pushes the softmax
# towards a one-hot choice, where its gradient vanishes. Measure the variance and the largest weight.

# %%
for d in (16, 256):
    qs, ks = rng.standard_normal((2000, d)), rng.standard_normal((2000, d))
    dots = (qs * ks).sum(-1)
    print(f"d={d:3d}: var(q.k) = {dots.var():7.1f}   var(q.k / sqrt(d)) = {(dots / math.sqrt(d)).var():.2f}")
many_scores = rng.standard_normal((500, 10, 256)) @ rng.standard_normal((256, 10))
peak_unscaled = F.softmax(ta.tensor(many_scores), -1).numpy().max(-1).mean()
peak_scaled = F.softmax(ta.tensor(many_scores / 16.0), -1).numpy().max(-1).mean()
print(f"mean largest softmax weight over 10 keys, d=256: unscaled {peak_unscaled:.2f}, scaled {peak_scaled:.2f}")
assert peak_unscaled > 0.9 > peak_scaled

# %% [markdown]
# ## Masking
# A causal mask lets token i see tokens j <= i only: set the other scores to -inf before the softmax, so their
# weights are exactly 0. (A boolean mask in tinyattn, as in PyTorch, is True where attention is allowed.)
#
# Exercise: `lessons/exercises/causal_mask.py`, the causal mask with a KV cache's offset and the padding mask of
# sequences of different lengths (`python -m lessons check causal_mask`).

# %%
causal = np.tril(np.ones((len(tokens), len(tokens)), dtype=bool))
masked_weights = F.attention_weights(ta.tensor(q), ta.tensor(k), attn_mask=ta.tensor(causal)).numpy()[0]
assert (masked_weights[~causal] == 0).all()
fig = viz.attention_heatmaps([weights[0], masked_weights], [tokens, tokens], [tokens, tokens],
                             ["self-attention", "with a causal mask"])
viz.save(fig, plot_path(args, "03_self_attention.png"))

# %% [markdown]
# ## The backward pass, by hand
# Training needs the gradients of a loss with respect to Q, K and V. Write the forward in three steps,
# S = Q K^T / sqrt(d), P = softmax(S) row by row, O = P V, and walk them backwards from dO = dLoss/dO:
# - O = P V is a matrix product, so dV = P^T dO and dP = dO V^T.
# - Each row of P is a softmax of the same row of S: dP_ij reaches S_ik through P_ij (dP/dS = diag(p) - p p^T),
#   which gives dS_ij = P_ij (dP_ij - sum_k dP_ik P_ik).
# - S = Q K^T / sqrt(d) is a product again: dQ = dS K / sqrt(d) and dK = dS^T Q / sqrt(d).
# The library's attention has exactly this backward: its reference twin
# (tinyattn/functional/attention.py, `ReferenceScaledDotProductAttention`) is these lines, and its fast version
# rearranges them for speed. Check the hand-written version three ways: against finite differences with
# ta.gradcheck, and against both of the library's paths.
#
# Exercises: derive these yourself in `lessons/exercises/softmax_backward.py` (the softmax alone) and
# `lessons/exercises/attention.py` (attention with masks, plugged into a GPT with `F.use`); `python -m lessons
# check NAME` grades each.

# %%
def attention_forward(q, k, v):
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))            # the max subtracted, as above: exp never overflows
    p /= p.sum(-1, keepdims=True)
    return p @ v, p


def attention_backward(q, k, v, p, grad_out):
    grad_v = p.transpose(0, 2, 1) @ grad_out
    grad_p = grad_out @ v.transpose(0, 2, 1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdims=True))
    grad_q = grad_s @ k / math.sqrt(q.shape[-1])
    grad_k = grad_s.transpose(0, 2, 1) @ q / math.sqrt(q.shape[-1])
    return grad_q, grad_k, grad_v


class HandWrittenAttention(ta.Function):
    """The two functions above as a Function of the library: forward and backward on raw arrays."""

    @staticmethod
    def forward(ctx, q, k, v):
        out, p = attention_forward(q, k, v)
        ctx.save_for_backward(q, k, v, p)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return attention_backward(*ctx.saved_tensors, grad_out)


qt, kt, vt = (ta.tensor(t, requires_grad=True) for t in (q, k, v))
assert ta.gradcheck(HandWrittenAttention.apply, (qt, kt, vt))
print("gradcheck: the hand-written backward matches finite differences")
grad_out = rng.standard_normal(by_hand.shape)
ours = attention_backward(q, k, v, attention_forward(q, k, v)[1], grad_out)
err_backward = 0.0
for path in ("fast", "reference"):
    with ta.reference(path == "reference"):
        F.scaled_dot_product_attention(qt, kt, vt).backward(ta.tensor(grad_out))
    diffs = [float(np.abs(mine - t.grad.numpy()).max()) for mine, t in zip(ours, (qt, kt, vt))]
    err_backward = max(err_backward, *diffs)
    for t in (qt, kt, vt):
        t.grad = None
print(f"hand-written dQ, dK, dV vs the library's fast and reference paths: max |difference| = {err_backward:.2e}")
assert err_backward < 1e-12

# %% [markdown]
# ## The graph autograd records
# Write one head with tensor operations instead of arrays, and every operation is recorded as it runs: `out.grad_fn`
# is the last step, and its `next_functions` lead back to the steps before, down to the parameters (as in PyTorch).
# `backward()` walks this graph from the result to the leaves, calling each step's backward. `viz.draw_graph`
# draws it; given the module, it names each parameter as `named_parameters()` does. (The fused steps are named
# after the path that ran them: `FastLinear`, or `ReferenceLinear` inside `with ta.reference():`.)

# %%
class OneHead(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(d, d, bias=False) for _ in range(3))

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
        return F.softmax(scores, dim=-1) @ v


one_head = OneHead(d_model).double()
out = one_head(ta.tensor(x)).sum()
print("out.grad_fn:", out.grad_fn, "<-", [node for node, _ in out.grad_fn.next_functions])
viz.save(viz.draw_graph(out, one_head, title="one attention head: parameters (blue) flow into operations (yellow)"),
         plot_path(args, "03_graph.png"))
out.backward()
print("after backward, every parameter has its gradient:",
      {name: tuple(p.grad.shape) for name, p in one_head.named_parameters()})

# %% [markdown]
# ## Multi-head attention is four matrix multiplications
# Split d_model into h heads of size d/h, attend in each head separately, concatenate, project:
# 1. project: X W_qkv -> Q, K, V, reshaped to (B, h, T, d/h);
# 2. scores: Q K^T / sqrt(d/h);
# 3. mix: softmax(scores) V;
# 4. output: concatenate the heads and multiply by W_o.
# Then compare with nn.Attention using the same weights.
#
# Two ways to store a weight meet here. The layer above kept W_q as (d_in, d_out) and computed x W_q, as papers
# write it. nn.Linear keeps PyTorch's layout, weight (out_features, in_features), and computes x W^T + b, so the
# code below reads `x @ w_qkv.T`: the same map with its matrix stored transposed (one output per row, which is how
# PyTorch checkpoints store it).

# %%
mha = nn.Attention(d_model, num_heads).double()
w_qkv, b_qkv = mha.qkv.weight.numpy(), mha.qkv.bias.numpy()
w_o, b_o = mha.out_proj.weight.numpy(), mha.out_proj.bias.numpy()
head = d_model // num_heads
qkv = x @ w_qkv.T + b_qkv                                                     # matmul 1
split = lambda t: t.reshape(1, len(tokens), num_heads, head).transpose(0, 2, 1, 3)
qh, kh, vh = (split(t) for t in np.split(qkv, 3, axis=-1))
s = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(head)                           # matmul 2
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
mixed = (p @ vh).transpose(0, 2, 1, 3).reshape(1, len(tokens), d_model)       # matmul 3
out = mixed @ w_o.T + b_o                                                     # matmul 4
err_multi = float(np.abs(out - mha(ta.tensor(x)).numpy()).max())
print(f"four matmuls vs nn.Attention: max |difference| = {err_multi:.2e}")
assert err_multi < 1e-12
fig = viz.attention_grid(p[0][None], tokens, tokens, row_names=["layer 0"], title="each head attends its own way")
viz.save(fig, plot_path(args, "03_heads.png"))

# %% [markdown]
# ## Self-attention ignores order
# Shuffle the tokens and the outputs shuffle the same way: the layer is permutation-equivariant. "cat sat on the
# mat" and "mat sat on the cat" look alike to it. Adding a position encoding to the embeddings breaks the symmetry.

# %%
perm = rng.permutation(len(tokens))
y = mha(ta.tensor(x)).numpy()
equivariance_err = float(np.abs(mha(ta.tensor(x[:, perm])).numpy() - y[:, perm]).max())
print(f"attention(shuffled x) vs shuffled attention(x): {equivariance_err:.1e}")
assert equivariance_err < 1e-12
table = nn.sinusoidal_table(len(tokens), d_model).numpy().astype(np.float64)
with_positions = mha(ta.tensor(x + table)).numpy()
shuffled_with_positions = mha(ta.tensor(x[:, perm] + table)).numpy()
broken = float(np.abs(shuffled_with_positions - with_positions[:, perm]).max())
print(f"with sinusoidal positions added, the same comparison differs by {broken:.2f}")
assert broken > 1e-3

# %% [markdown]
# ## The sinusoidal table: a shift is a rotation
# Columns 2i and 2i+1 hold sin(p w_i) and cos(p w_i) for position p, at frequencies w_i = 10000^(-2i/d) that fall
# geometrically from 1 to about 1/10000. Vaswani et al. (2017, section 3.5) chose them because "for any fixed offset
# k, PE_pos+k can be represented as a linear function of PE_pos" (derived in Dive into Deep Learning, d2l.ai, section
# "Self-Attention and Positional Encoding"): moving k positions on turns each pair by the angle k w_i, since
#     sin((p + k) w) =  cos(k w) sin(p w) + sin(k w) cos(p w)
#     cos((p + k) w) = -sin(k w) sin(p w) + cos(k w) cos(p w),
# so PE(p + k) = M_k PE(p), where M_k is block diagonal, one 2x2 rotation per frequency, and depends on k alone, not
# on p. A linear map can therefore say "k places on" at every position at once: a query projected by M_k looks like
# the encoding k places ahead, and its dot product with the keys peaks there. (The dot products between encodings,
# on the right of the figure, depend on the offset too, but they are the same for k and -k, so they cannot tell
# ahead from behind, and attention never sees them: W_q and W_k stand between the encoding and the score.)
# Build M_k and measure both: the identity at every position, and the query that finds the token k places on.

# %%
long_table = nn.sinusoidal_table(64, 64).numpy().astype(np.float64)        # (positions, dims), rounded to float32
similarity = long_table @ long_table.T
viz.save(viz.position_encoding(long_table), plot_path(args, "03_positions.png"))
offsets_agree = float(np.abs(similarity[10, 15] - similarity[40, 45]))
assert offsets_agree < 1e-4                    # same offset, same similarity, wherever it sits
frequencies = 10000.0 ** (-np.arange(0, 64, 2) / 64)                      # w_i of the pair (2i, 2i + 1)


def shift_matrix(k):
    """M_k with PE(p + k) = M_k PE(p): for each pair (sin, cos) a rotation by the angle k w_i."""
    cos, sin = np.cos(k * frequencies), np.sin(k * frequencies)
    m = np.zeros((64, 64))
    m[0::2, 0::2], m[0::2, 1::2] = np.diag(cos), np.diag(sin)               # sin row: cos(kw) sin + sin(kw) cos
    m[1::2, 0::2], m[1::2, 1::2] = np.diag(-sin), np.diag(cos)              # cos row: -sin(kw) sin + cos(kw) cos
    return m


shift_err = 0.0
for k in (1, 7, 30):
    err = float(np.abs(long_table[k:] - long_table[:-k] @ shift_matrix(k).T).max())   # every p at once
    shift_err = max(shift_err, err)
    print(f"k = {k:2d}: max over p of |PE(p + k) - M_k PE(p)| = {err:.1e}")
print(f"(the table is float32: each entry is rounded by up to {np.finfo(np.float32).eps / 2:.1e})")
assert shift_err < 1e-6
k = 3
scores = (long_table @ shift_matrix(k).T) @ long_table.T                    # queries M_k PE(p), keys PE(j)
found = scores.argmax(-1)[:-k] == np.arange(64 - k) + k                    # the positions p that have a p + k
print(f"queries projected by M_{k}: the strongest key is the one {k} places on at {found.mean():.0%} of the positions")
assert found.all()
report(sdpa_max_abs_err=err_single, backward_max_abs_err=err_backward, multihead_max_abs_err=err_multi,
       equivariance_err=equivariance_err, positions_break_equivariance=broken,
       softmax_peak_unscaled=float(peak_unscaled), softmax_peak_scaled=float(peak_scaled),
       shift_is_linear_err=shift_err)
