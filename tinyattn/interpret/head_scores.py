"""What each head does, as a number per head, from its attention weights: how much it looks at the previous token,
at earlier copies of the current token, or at the token after an earlier copy (an induction head; Elhage et al.
2021, Olsson et al. 2022).

Each score takes weights, a list over layers of (B, H, T, T) causal attention weights (Tensors or NumPy arrays, as
Recording.attention or return_attention give them), and returns a (layers, heads) NumPy array: the attention a
head puts on its score's target positions, averaged over every (sequence, query position) that has a target. 1 is
all of it, every time.
"""
import numpy as np

from ..tensor import Tensor


def stacked_weights(weights):
    """(layers, B, H, T, T) float64 on the host, checked."""
    arrays = [w.numpy() if isinstance(w, Tensor) else np.asarray(w) for w in weights]
    if not arrays:
        raise ValueError("weights is empty: pass a list over layers of (B, H, T, T) attention weights")
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1 or arrays[0].ndim != 4 or arrays[0].shape[-1] != arrays[0].shape[-2]:
        raise ValueError(f"weights must be a list over layers of (B, H, T, T) self-attention weights of one shape, "
                         f"got shapes {[a.shape for a in arrays]}")
    return np.stack(arrays).astype(np.float64)


def _score(w, targets):
    """The mean over (b, i) with any target of the weight that query i puts on its targets: w (layers, B, H, T, T);
    targets (B, T, T) bool, targets[b, i, k] = key k is a target of query i in sequence b."""
    if targets.shape != w.shape[1:2] + w.shape[3:]:
        raise ValueError(f"tokens give targets for (B, T, T) = {targets.shape}, the weights are (B, T, T) = "
                         f"{w.shape[1:2] + w.shape[3:]}")
    rows = targets.any(axis=-1)                                              # (B, T): queries with a target
    if not rows.any():
        raise ValueError("no query position has a target: the tokens repeat nowhere (use a sequence with repeats)")
    on_targets = (w * targets[None, :, None]).sum(axis=-1)                   # (layers, B, H, T)
    return (on_targets * rows[None, :, None]).sum(axis=(1, 3)) / rows.sum()


def _tokens(tokens):
    tokens = tokens.numpy() if isinstance(tokens, Tensor) else np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be (B, T), got shape {tokens.shape}")
    return tokens


def _earlier_copies(tokens):
    """(B, T, T) bool: [b, i, j] = j < i and tokens[b, j] == tokens[b, i]."""
    t = tokens.shape[1]
    return (tokens[:, :, None] == tokens[:, None, :]) & np.tri(t, t, -1, dtype=bool)


def previous_token_score(weights):
    """Mean attention from each position i >= 1 to position i - 1. A head that always looks one token back scores 1;
    uniform causal attention over T positions scores the mean of 1 / (i + 1) for i = 1 .. T - 1."""
    w = stacked_weights(weights)
    b, _, t, _ = w.shape[1:]
    if t < 2:
        raise ValueError(f"previous_token_score needs sequences of 2 tokens or more (a first token has no previous "
                         f"one), got weights over {t}")
    return _score(w, np.broadcast_to(np.eye(t, k=-1, dtype=bool), (b, t, t)))


def duplicate_token_score(weights, tokens):
    """Mean attention from each position i whose token occurred earlier to all its earlier occurrences j < i
    (tokens[j] == tokens[i]). tokens: (B, T) token ids of the sequences the weights were computed on."""
    return _score(stacked_weights(weights), _earlier_copies(_tokens(tokens)))


def induction_score(weights, tokens):
    """Mean attention from each position i whose token occurred earlier at j < i to the positions j + 1, the tokens
    that followed its earlier occurrences: where an induction head looks, to predict that what came next then comes
    next now. On a random sequence repeated once (no token twice within a copy) these are the second copy's
    positions, each attending to the token after its first occurrence. tokens: (B, T) token ids."""
    copies = _earlier_copies(_tokens(tokens))
    targets = np.zeros_like(copies)
    targets[:, :, 1:] = copies[:, :, :-1]                                    # j earlier copy -> j + 1 target
    return _score(stacked_weights(weights), targets)
