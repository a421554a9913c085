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

Which weights are read, and which of TransformerLens's processing steps (HookedTransformer.from_pretrained's
defaults, TransformerBridge.enable_compatibility_mode's) each setting equals:
- fold_ln=True (the default): each LayerNorm's weight is multiplied into the matrices that read its output (W_Q,
  W_K, W_V after ln1; W_U after ln_f). That is TransformerLens's fold_layer_norm(center_weights=False), the fold it
  does on RMSNorm models; its fold_ln on a LayerNorm model also centres those readers (below). fold_ln=False: the
  parameters as they are (TransformerLens's fold_ln=False).
- center_writing_weights=True: W_E and each W_O less their mean over d_model (TransformerLens's
  center_writing_weights); with fold_ln=True the readers W_Q, W_K, W_V and W_U less their mean over d_model too, so
  that the two together are TransformerLens's fold_ln=True, center_writing_weights=True.
- center_unembed=True: W_U less its mean over the vocabulary (TransformerLens's center_unembed).
All three True are TransformerLens's defaults: its composition scores, circuits and copying scores. Biases are left
out (its fold_value_biases moves biases only). Centring leaves what the model computes unchanged (each reader of the
residual stream is a LayerNorm, which subtracts the mean first; center_unembed adds one number to all of a
position's logits) but not the scores: the mean direction is in each unprocessed matrix's norm. It needs pre-norm
LayerNorm blocks (TransformerLens skips it on RMSNorm models; here that is an error).
"""
import numpy as np

from .. import nn
from ..tensor import Tensor
from .points import integer


def _host(x):
    return (x.numpy() if isinstance(x, Tensor) else np.asarray(x)).astype(np.float64)


class FactoredMatrix:
    """A (m, n) matrix kept as A (m, k) @ B (k, n) with k small: norms, eigenvalues and products without forming
    the whole. Spelled as TransformerLens's: A, B, AB (the whole), BA (k, k), T, the eigenvalues (a property) and
    norm() (a method). @ takes arrays on either side (a matrix gives a FactoredMatrix that keeps the smaller inner
    dimension, a vector gives the vector) and other FactoredMatrix, so W_E @ OV @ W_U works with W_E, W_U arrays
    (a Tensor on the left: take .numpy() first, Tensor's @ does not know this class)."""

    __array_ufunc__ = None          # NumPy's array @ FactoredMatrix hands over to __rmatmul__

    def __init__(self, A, B):
        A, B = _host(A), _host(B)
        if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
            raise ValueError(f"FactoredMatrix needs A (m, k) and B (k, n), got {A.shape} and {B.shape}")
        self.A, self.B = A, B

    @property
    def shape(self):
        return self.A.shape[0], self.B.shape[1]

    @property
    def AB(self):
        return self.A @ self.B

    @property
    def BA(self):
        """B @ A, (k, k): it has the nonzero eigenvalues of a square AB."""
        if self.shape[0] != self.shape[1]:
            raise ValueError(f"BA needs a square matrix (its A and B then multiply both ways), this one is "
                             f"{self.shape}")
        return self.B @ self.A

    @property
    def T(self):
        return FactoredMatrix(self.B.T, self.A.T)

    def norm(self):
        """The Frobenius norm: sqrt(trace(A^T A B B^T)), from two (k, k) matrices."""
        return float(np.sqrt(max(np.sum((self.A.T @ self.A) * (self.B @ self.B.T)), 0.0)))

    @property
    def eigenvalues(self):
        """The k eigenvalues of BA: the nonzero eigenvalues of AB (a square matrix) and zeros."""
        return np.linalg.eigvals(self.BA)

    def _operand(self, other, side):
        other = _host(other)
        size = self.shape[1] if side == "right" else self.shape[0]
        if other.ndim not in (1, 2) or other.shape[0 if side == "right" else -1] != size:
            raise ValueError(f"FactoredMatrix {self.shape} @ needs a vector or matrix with {size} "
                             f"{'rows' if side == 'right' else 'columns'} on its {side}, got shape {other.shape}")
        return other

    def __matmul__(self, other):
        if isinstance(other, FactoredMatrix):
            return (self @ other.A) @ other.B
        other = self._operand(other, "right")
        if other.ndim == 1:
            return self.A @ (self.B @ other)
        inner = self.A.shape[1]
        return FactoredMatrix(self.A, self.B @ other) if inner < self.shape[1] else FactoredMatrix(self.AB, other)

    def __rmatmul__(self, other):
        other = self._operand(other, "left")
        if other.ndim == 1:
            return (other @ self.A) @ self.B
        inner = self.A.shape[1]
        return FactoredMatrix(other @ self.A, self.B) if inner < self.shape[0] else FactoredMatrix(other, self.AB)

    def __getitem__(self, rows_and_columns):
        """[rows, columns] keeps the factors of those rows and columns (index arrays or slices)."""
        rows, columns = rows_and_columns
        return FactoredMatrix(self.A[rows], self.B[:, columns])

    def __repr__(self):
        return f"FactoredMatrix({self.shape[0]} x {self.shape[1]}, inner {self.A.shape[1]})"


def _attention(model, layer):
    attention = model.blocks[layer].attn
    if not isinstance(attention, nn.Attention) or attention.cross:
        raise TypeError(f"circuits read the self-attention of nn.Attention, blocks.{layer}.attn is a "
                        f"{type(attention).__name__}")
    return attention


def _norm_weight(norm, fold_ln):
    return 1.0 if not fold_ln or norm is None or norm.weight is None else _host(norm.weight)[:, None]


def _centred(w, axis, center):
    """w less its mean over axis where center (see the module docstring), w where not."""
    return w - w.mean(axis, keepdims=True) if center else w


def _check_centring(model, center_writing_weights):
    if not center_writing_weights:
        return
    norms = [block.ln1 for block in model.blocks] + [model.ln_f]
    if not model.config.prenorm or not all(isinstance(norm, nn.LayerNorm) for norm in norms):
        found = "post-norm blocks" if not model.config.prenorm else \
            f"{sorted({type(n).__name__ for n in norms if not isinstance(n, nn.LayerNorm)})}"
        raise ValueError(f"center_writing_weights needs pre-norm LayerNorm blocks (a LayerNorm subtracts the "
                         f"residual's mean before anything reads it, which makes centring leave the model as it "
                         f"was); {type(model).__name__} has {found}")


def head_weights(model, layer, head, fold_ln=True, center_writing_weights=False):
    """{"W_Q", "W_K", "W_V": (D, head_dim), "W_O": (head_dim, D)} of one head of models.GPT, float64 (see the
    module docstring for fold_ln and center_writing_weights)."""
    attention = _attention(model, layer)
    head = integer(head, "head")
    if not 0 <= head < attention.num_heads:
        raise IndexError(f"blocks.{layer}.attn has {attention.num_heads} heads (0 to {attention.num_heads - 1}), got "
                         f"head {head}")
    _check_centring(model, center_writing_weights)
    d, dh = attention.d_model, attention.head_dim
    kv_head = head // (attention.num_heads // attention.num_kv_heads)                     # GQA: the shared one
    kv = attention.num_kv_heads * dh
    w = _host(attention.qkv.weight)                                                       # (d + 2 kv, d)
    scale = _norm_weight(model.blocks[layer].ln1, fold_ln)
    rows = {"W_Q": head * dh, "W_K": d + kv_head * dh, "W_V": d + kv + kv_head * dh}
    weights = {name: _centred(scale * w[start:start + dh].T, 0, center_writing_weights and fold_ln)
               for name, start in rows.items()}
    weights["W_O"] = _centred(_host(attention.out_proj.weight)[:, head * dh:(head + 1) * dh].T, 1,
                              center_writing_weights)
    return weights


def _embedding(model, center_writing_weights):
    return _centred(_host(model.tok_emb.weight), 1, center_writing_weights)                # (vocab, D)


def _unembedding(model, fold_ln, center_writing_weights, center_unembed):
    w_u = _centred(_norm_weight(model.ln_f, fold_ln) * _host(model.head.weight).T, 0,      # (D, vocab)
                   center_writing_weights and fold_ln)
    return _centred(w_u, 1, center_unembed)


def qk_circuit(model, layer, head, queries=None, keys=None, fold_ln=True, center_writing_weights=False):
    """W_E W_Q W_K^T W_E^T over tokens, (vocab, vocab) factored, restricted to the query and key token ids given
    (index arrays; None: all)."""
    w = head_weights(model, layer, head, fold_ln, center_writing_weights)
    w_e = _embedding(model, center_writing_weights)
    circuit = FactoredMatrix(w_e @ w["W_Q"], (w_e @ w["W_K"]).T)
    return circuit[slice(None) if queries is None else queries, slice(None) if keys is None else keys]


def ov_circuit(model, layer, head, sources=None, outputs=None, fold_ln=True, center_writing_weights=False,
               center_unembed=False):
    """W_E W_V W_O W_U over tokens, (vocab, vocab) factored: row a, column b is how much attending to token a
    raises the logit of token b (directly); restricted to the source and output token ids given."""
    w = head_weights(model, layer, head, fold_ln, center_writing_weights)
    circuit = FactoredMatrix(_embedding(model, center_writing_weights) @ w["W_V"],
                             w["W_O"] @ _unembedding(model, fold_ln, center_writing_weights, center_unembed))
    return circuit[slice(None) if sources is None else sources, slice(None) if outputs is None else outputs]


def copying_score(circuit):
    """Elhage et al.'s eigenvalue score of an OV circuit (a square FactoredMatrix or array): sum of the eigenvalues
    over the sum of their absolute values, in [-1, 1]; near 1 when the head raises the logit of the token it attends
    to (copies), near -1 when it lowers it."""
    values = circuit.eigenvalues if isinstance(circuit, FactoredMatrix) else np.linalg.eigvals(np.asarray(circuit))
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


def composition_scores(model, kind="K", fold_ln=True, center_writing_weights=False):
    """Every head's composition with every head of a later layer: (layers, heads, layers, heads), [l1, h1, l2, h2]
    the score of the writer (l1, h1) into the reader (l2, h2). kind: "Q", "K" or "V". A pair where the reader is not
    in a later layer (l1 >= l2) cannot compose and is NaN, always (TransformerLens's all_composition_scores writes 0
    there; np.nan_to_num(scores) gives its array): a 0 would read as "composes with nothing"."""
    if kind not in ("Q", "K", "V"):
        raise ValueError(f"kind must be 'Q', 'K' or 'V', got {kind!r}")
    layers, heads = len(model.blocks), _attention(model, 0).num_heads
    w = [[head_weights(model, l, h, fold_ln, center_writing_weights) for h in range(heads)] for l in range(layers)]
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
