"""Circuits read from the weights alone (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits").

In the row-vector convention (x (1, D) times a matrix), head h of a layer reads the residual stream through W_Q,
W_K, W_V (D, head_dim) and writes through W_O (head_dim, D):
- its QK circuit W_Q W_K^T (D, D) says how much a query position's residual x_q wants a key's x_k: x_q W_QK x_k^T
  (before RoPE's rotation: this is the score of two tokens at the same position);
- its OV circuit W_V W_O (D, D) says what it writes when it attends to a residual x: x W_OV.
Between tokens, through the embedding W_E (vocab, D) and the unembedding W_U (D, vocab): W_E W_QK W_E^T and
W_E W_OV W_U, both (vocab, vocab), kept factored (FactoredMatrix) since vocab x vocab can be large.

A head of a later layer composes with an earlier one when it reads what that one wrote: through its queries
(Q-composition), its keys (K-composition; an induction head's keys read a previous-token head's output) or its
values (V-composition). The score is the Frobenius norm of the product over the product of the norms:
||W_OV^A W_QK^B|| (Q), ||W_OV^A W_QK^B^T|| (K), ||W_OV^A W_OV^B|| (V), each over ||W_OV^A|| ||W_right^B||.

With fold_ln (the default) each LayerNorm's weight is folded into the matrices that read its output (W_Q, W_K,
W_V after ln1, W_U after ln_f), as TransformerLens's fold_ln; biases are left out.
"""
import numpy as np

from .. import nn
from ..tensor import Tensor


class FactoredMatrix:
    """A (m, n) matrix kept as left (m, k) @ right (k, n) with k small: norms, eigenvalues and products without
    forming the whole."""

    def __init__(self, left, right):
        if left.ndim != 2 or right.ndim != 2 or left.shape[1] != right.shape[0]:
            raise ValueError(f"FactoredMatrix needs left (m, k) and right (k, n), got {left.shape} and {right.shape}")
        self.left, self.right = left, right

    @property
    def shape(self):
        return self.left.shape[0], self.right.shape[1]

    def full(self):
        return self.left @ self.right

    def norm(self):
        """The Frobenius norm: sqrt(trace(L^T L R R^T)), from two (k, k) matrices."""
        return float(np.sqrt(max(np.sum((self.left.T @ self.left) * (self.right @ self.right.T)), 0.0)))

    def eigenvalues(self):
        """The k eigenvalues of R L: the nonzero eigenvalues of L R (a square matrix) and zeros."""
        if self.shape[0] != self.shape[1]:
            raise ValueError(f"eigenvalues need a square matrix, this one is {self.shape}")
        return np.linalg.eigvals(self.right @ self.left)

    def __getitem__(self, rows_and_columns):
        """[rows, columns] keeps the factors of those rows and columns (index arrays or slices)."""
        rows, columns = rows_and_columns
        return FactoredMatrix(self.left[rows], self.right[:, columns])

    def __repr__(self):
        return f"FactoredMatrix({self.shape[0]} x {self.shape[1]}, inner {self.left.shape[1]})"


def _host(x):
    return (x.numpy() if isinstance(x, Tensor) else np.asarray(x)).astype(np.float64)


def _attention(model, layer):
    attention = model.blocks[layer].attn
    if not isinstance(attention, nn.MultiHeadAttention) or attention.cross:
        raise TypeError(f"circuits read the self-attention of nn.MultiHeadAttention, blocks.{layer}.attn is a "
                        f"{type(attention).__name__}")
    return attention


def _norm_weight(norm, fold_ln):
    return 1.0 if not fold_ln or norm is None or norm.weight is None else _host(norm.weight)[:, None]


def head_weights(model, layer, head, fold_ln=True):
    """{"W_Q", "W_K", "W_V": (D, head_dim), "W_O": (head_dim, D)} of one head of models.GPT, float64 (see the
    module docstring for fold_ln)."""
    attention = _attention(model, layer)
    if not 0 <= head < attention.num_heads:
        raise IndexError(f"blocks.{layer}.attn has {attention.num_heads} heads (0 to {attention.num_heads - 1}), got "
                         f"head {head}")
    d, dh = attention.d_model, attention.head_dim
    kv_head = head // (attention.num_heads // attention.num_kv_heads)                     # GQA: the shared one
    kv = attention.num_kv_heads * dh
    w = _host(attention.qkv.weight)                                                       # (d + 2 kv, d)
    scale = _norm_weight(model.blocks[layer].ln1, fold_ln)
    rows = {"W_Q": head * dh, "W_K": d + kv_head * dh, "W_V": d + kv + kv_head * dh}
    weights = {name: scale * w[start:start + dh].T for name, start in rows.items()}
    weights["W_O"] = _host(attention.out_proj.weight)[:, head * dh:(head + 1) * dh].T
    return weights


def _unembedding(model, fold_ln):
    return _norm_weight(model.ln_f, fold_ln) * _host(model.head.weight).T                 # (D, vocab)


def qk_circuit(model, layer, head, queries=None, keys=None, fold_ln=True):
    """W_E W_Q W_K^T W_E^T over tokens, (vocab, vocab) factored, restricted to the query and key token ids given
    (index arrays; None: all)."""
    w, w_e = head_weights(model, layer, head, fold_ln), _host(model.tok_emb.weight)
    circuit = FactoredMatrix(w_e @ w["W_Q"], (w_e @ w["W_K"]).T)
    return circuit[slice(None) if queries is None else queries, slice(None) if keys is None else keys]


def ov_circuit(model, layer, head, sources=None, outputs=None, fold_ln=True):
    """W_E W_V W_O W_U over tokens, (vocab, vocab) factored: row a, column b is how much attending to token a
    raises the logit of token b (directly); restricted to the source and output token ids given."""
    w = head_weights(model, layer, head, fold_ln)
    circuit = FactoredMatrix(_host(model.tok_emb.weight) @ w["W_V"], w["W_O"] @ _unembedding(model, fold_ln))
    return circuit[slice(None) if sources is None else sources, slice(None) if outputs is None else outputs]


def copying_score(circuit):
    """Elhage et al.'s eigenvalue score of an OV circuit (a square FactoredMatrix or array): sum of the eigenvalues
    over the sum of their absolute values, in [-1, 1]; near 1 when the head raises the logit of the token it attends
    to (copies), near -1 when it lowers it."""
    values = circuit.eigenvalues() if isinstance(circuit, FactoredMatrix) else np.linalg.eigvals(np.asarray(circuit))
    total = np.abs(values).sum()
    if total == 0:
        raise ValueError("the circuit is zero: it has no eigenvalues to score")
    return float(values.sum().real / total)


def composition_score(left, right):
    """||left @ right||_F / (||left||_F ||right||_F) of two (D, D) matrices: 1 when right reads exactly what left
    writes (both rank one and aligned), 0 when it reads nothing of it."""
    left, right = np.asarray(left, dtype=np.float64), np.asarray(right, dtype=np.float64)
    denominator = np.linalg.norm(left) * np.linalg.norm(right)
    return float(np.linalg.norm(left @ right) / denominator) if denominator else 0.0


def composition_scores(model, kind="K", fold_ln=True):
    """Every head's composition with every head of a later layer: (layers, heads, layers, heads), [l1, h1, l2, h2]
    the score of the writer (l1, h1) into the reader (l2, h2), NaN where l1 >= l2. kind: "Q", "K" or "V"."""
    if kind not in ("Q", "K", "V"):
        raise ValueError(f"kind must be 'Q', 'K' or 'V', got {kind!r}")
    layers, heads = len(model.blocks), _attention(model, 0).num_heads
    w = [[head_weights(model, l, h, fold_ln) for h in range(heads)] for l in range(layers)]
    ov = [[x["W_V"] @ x["W_O"] for x in row] for row in w]
    qk = [[x["W_Q"] @ x["W_K"].T for x in row] for row in w]
    read = {"Q": qk, "K": [[m.T for m in row] for row in qk], "V": ov}[kind]
    scores = np.full((layers, heads, layers, heads), np.nan)
    for l1 in range(layers):
        for l2 in range(l1 + 1, layers):
            for h1 in range(heads):
                for h2 in range(heads):
                    scores[l1, h1, l2, h2] = composition_score(ov[l1][h1], read[l2][h2])
    return scores
