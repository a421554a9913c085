"""Attention rollout (Abnar and Zuidema 2020, "Quantifying Attention Flow in Transformers").

One layer's attention says which tokens of its input a token reads; but its input tokens are already mixtures of
the layer below's. Rollout follows the mixing down to the input: per layer, the heads' mean attention A with the
identity added for the residual connection (a token also keeps itself), rows renormalised to sum to 1; then the
product of the layers' matrices, the top layer's on the left, A_L ... A_2 A_1. Row i of the result: how much of
token i at the top comes from each input token.
"""
import numpy as np

from .head_scores import stacked_weights


def attention_rollout(weights):
    """weights: a list over layers, bottom first, of (B, H, T, T) attention weights (Tensors or NumPy arrays) ->
    (B, T, T) NumPy array, each row summing to 1."""
    layers = stacked_weights(weights)                                         # (layers, B, H, T, T), float64
    t = layers.shape[-1]
    rollout = np.broadcast_to(np.eye(t), layers.shape[1:2] + (t, t))
    for layer in layers:
        a = layer.mean(axis=1) + np.eye(t)                                    # (B, T, T): heads' mean + residual
        a /= a.sum(axis=-1, keepdims=True)
        rollout = a @ rollout                                                 # this layer on the left
    return rollout
