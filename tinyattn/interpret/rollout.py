"""Attention rollout (Abnar and Zuidema 2020, "Quantifying Attention Flow in Transformers").

One layer's attention says which tokens of its input a token reads; but its input tokens are already mixtures of
the layer below's. Rollout follows the mixing down to the input: per layer, the heads' mean attention A with the
identity added for the residual connection (a token also keeps itself), rows renormalised to sum to 1; then the
product of the layers' matrices, the top layer's on the left, A_L ... A_2 A_1. Row i of the result: how much of
token i at the top comes from each input token.
"""
import numpy as np

from ..tensor import Tensor


def attention_rollout(weights):
    """weights: a list over layers, bottom first, of (B, H, T, T) attention weights (Tensors or NumPy arrays) ->
    (B, T, T) NumPy array, each row summing to 1."""
    arrays = [w.numpy() if isinstance(w, Tensor) else np.asarray(w) for w in weights]
    if not arrays or any(a.ndim != 4 or a.shape[-1] != a.shape[-2] or a.shape != arrays[0].shape for a in arrays):
        raise ValueError("weights must be a non-empty list over layers of (B, H, T, T) self-attention weights of one "
                         f"shape, got shapes {[a.shape for a in arrays]}")
    t = arrays[0].shape[-1]
    rollout = np.broadcast_to(np.eye(t), arrays[0].shape[:1] + (t, t))
    for layer in arrays:
        a = layer.astype(np.float64).mean(axis=1) + np.eye(t)                 # (B, T, T): heads' mean + residual
        a /= a.sum(axis=-1, keepdims=True)
        rollout = a @ rollout                                                 # this layer on the left
    return rollout
