"""Activation patching swept over a model: one piece at a time taken from a clean run into a corrupted run, and a
metric of the patched run's logits, as an array (Meng et al. 2022's causal tracing; Wang et al. 2022).

    effect = patching_sweep(model, clean_ids, corrupted_ids, metric, over="heads")       # (layers, heads)
    effect = patching_sweep(model, clean_ids, corrupted_ids, metric, over="positions")   # (layers, positions)

over="heads" patches each head's output z (every position) at each attention layer; over="positions" patches the
residual stream entering each block (the point hook_resid_pre, or another residual point) at one position. metric
takes the patched run's logits and returns a number (a Tensor of one element or a float).
"""
import numpy as np

from ..tensor import Tensor, no_grad
from .points import intervene, point_names, replace_at
from .recording import ATTENTION, record


def _number(value):
    return float(value.item() if isinstance(value, Tensor) else value)


def patching_sweep(model, clean_ids, corrupted_ids, metric, over="heads", point="hook_resid_pre"):
    """metric of the corrupted run with one piece from the clean run, for every piece: a (layers, heads) array for
    over="heads", (layers, positions) for over="positions" (point: which residual point of each block, e.g.
    "hook_resid_mid"). Clean and corrupted inputs must have one shape."""
    if over not in ("heads", "positions"):
        raise ValueError(f"over must be 'heads' or 'positions', got {over!r}")
    clean_shape, corrupted_shape = tuple(clean_ids.shape), tuple(corrupted_ids.shape)
    if clean_shape != corrupted_shape:
        raise ValueError(f"clean and corrupted inputs must have one shape to patch between them, got {clean_shape} "
                         f"and {corrupted_shape}")
    if over == "heads":
        attentions = [(n, m) for n, m in model.named_modules() if isinstance(m, ATTENTION)]
        if not attentions:
            raise ValueError(f"{type(model).__name__} has no attention whose heads can be patched (no "
                             f"{' or '.join(c.__name__ for c in ATTENTION)}); over='positions' patches its residual "
                             "points")
        names = [f"{n}.hook_z" for n, _ in attentions]
        pieces = [list(range(m.num_heads)) for _, m in attentions]
        dim = 2                                                           # z is (B, T, H, head_dim)
    else:
        names = [n for n in point_names(model) if n.endswith("." + point) and n.startswith("blocks.")]
        if not names:
            raise KeyError(f"{type(model).__name__} has no block point {point!r}; its blocks' points: "
                           f"{sorted({n.split('.')[-1] for n in point_names(model) if n.startswith('blocks.')})}")
        pieces = [list(range(clean_shape[1]))] * len(names)
        dim = 1                                                           # (B, T, D)
    with no_grad():
        with record(model, names) as clean:
            model(clean_ids)
        effect = np.zeros((len(names), max(len(p) for p in pieces)))
        for row, (name, indices) in enumerate(zip(names, pieces)):
            for i in indices:
                patch = {name: lambda x, name=name, i=i: replace_at(x, clean[name], dim, [i])}
                with intervene(model, patch):
                    effect[row, i] = _number(metric(model(corrupted_ids)))
    return effect
