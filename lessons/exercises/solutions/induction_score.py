"""Solution · the induction score, from recorded attention weights (lesson 20)."""
import numpy as np


def induction_targets(tokens):
    t = tokens.shape[1]
    earlier = (tokens[:, :, None] == tokens[:, None, :]) & np.tri(t, t, -1, dtype=bool)      # [b, i, j]
    targets = np.zeros_like(earlier)
    targets[:, :, 1:] = earlier[:, :, :-1]
    return targets


def induction_score(weights, tokens):
    w = np.stack(weights)                                                   # (layers, B, H, T, T)
    targets = induction_targets(tokens)
    counted = targets.any(axis=-1)                                          # (B, T)
    on_targets = (w * targets[None, :, None]).sum(axis=-1)                  # (layers, B, H, T)
    return (on_targets * counted[None, :, None]).sum(axis=(1, 3)) / counted.sum()
