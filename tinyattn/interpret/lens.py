"""Reading the residual stream of a pre-norm GPT (models.GPT in eval mode): the logit lens, the final residual split
into the parts that wrote it, and direct logit attribution.

The residual stream entering the final LayerNorm is a sum: the token embedding, the position embedding (learned or
sinusoidal positions), per layer each head's result (its z through its slice of out_proj), out_proj's bias (one part
per layer, as TransformerLens keeps it) and the MLP's output. With the final LayerNorm's scale frozen at the run's
value (TransformerLens's apply_ln_to_stack), the norm is linear in the residual less its mean, so each part's
contribution to a logit adds up: direct logit attribution. Everything here returns NumPy arrays on the host, in the
model's dtype.
"""
from dataclasses import dataclass

import numpy as np

from .. import nn
from ..tensor import Tensor, no_grad
from .recording import record


def _gpt(model):
    """Check that model is a residual stream these tools can read: pre-norm, LayerNorm at the end, eval mode."""
    if not all(hasattr(model, a) for a in ("tok_emb", "blocks", "ln_f", "head", "config")):
        raise TypeError(f"the residual-stream tools read models.GPT (tok_emb, blocks, ln_f, head), got "
                        f"{type(model).__name__}")
    if not model.config.prenorm:
        raise ValueError("a post-norm model's residual stream is normalised inside each block, so it is not a sum of "
                         "its parts: these tools read pre-norm models (GPTConfig(prenorm=True))")
    if not isinstance(model.ln_f, nn.LayerNorm):
        raise TypeError(f"the final norm must be nn.LayerNorm (its scale is what the lens freezes), got "
                        f"{type(model.ln_f).__name__}")
    if model.training:
        raise ValueError("the model is in training mode: dropout would make the parts not add up; call model.eval()")


def _host(x):
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


def apply_final_ln(model, residual, scale=None):
    """residual (..., D) through the final LayerNorm: with its own scale (scale None), or with a given scale (...,
    1) held fixed, as TransformerLens's apply_ln_to_stack (then linear in the residual less its mean; the weight is
    applied, the bias too)."""
    residual = _host(residual)
    centred = residual - residual.mean(-1, keepdims=True)
    if scale is None:
        scale = np.sqrt((centred * centred).mean(-1, keepdims=True) + model.ln_f.eps)
    out = centred / scale * _host(model.ln_f.weight)
    return out if model.ln_f.bias is None else out + _host(model.ln_f.bias)


def logit_lens(model, ids, scale="own"):
    """The logits each layer's residual stream would give if the model stopped there: (n_layer + 1, B, T, vocab),
    row 0 from the embeddings, row l + 1 after block l (the last row is the model's logits). scale="own" puts each
    residual through the final LayerNorm as it is (TransformerLens 4's cache.accumulated_resid(apply_ln=True) @ W_U
    + b_U, which recomputes the norm for the unembedding); scale="final" uses the final residual's scale for all (the
    residuals are then read on one linear scale: cache.apply_ln_to_stack(cache.accumulated_resid(),
    recompute_ln=False) @ W_U + b_U)."""
    _gpt(model)
    if scale not in ("own", "final"):
        raise ValueError(f"scale must be 'own' or 'final', got {scale!r}")
    points = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_resid_post" for i in range(len(model.blocks))]
    with no_grad(), record(model, points + ["ln_f.hook_scale"]) as cache:
        model(ids)
    final_scale = cache["ln_f.hook_scale"].numpy() if scale == "final" else None
    w_u = _host(model.head.weight)
    return np.stack([apply_final_ln(model, cache[p].numpy(), final_scale) @ w_u.T for p in points])


@dataclass
class Decomposition:
    """The final residual (B, T, D), as it enters the final LayerNorm, split into parts: components (n, B, T, D)
    with labels ("embed", "pos", "L0H0", ..., "L0 attn bias", "L0 mlp", ...); scale (B, T, 1) is the final
    LayerNorm's scale in that run. components.sum(0) is the residual up to rounding (error())."""
    components: np.ndarray
    labels: list
    residual: np.ndarray
    scale: np.ndarray

    def error(self):
        """max |sum of the parts - residual| / max |residual|, the sum taken in float64."""
        difference = self.components.astype(np.float64).sum(0) - self.residual
        return float(np.abs(difference).max() / np.abs(self.residual).max())

    def index(self, label):
        if label not in self.labels:
            raise KeyError(f"no component {label!r}; the components: {', '.join(self.labels)}")
        return self.labels.index(label)


def decompose_residual(model, ids):
    """The final residual stream of models.GPT on ids, split into its parts (see Decomposition)."""
    _gpt(model)
    layers = range(len(model.blocks))
    has_mlp = model.blocks[0].mlp is not None
    points = (["hook_embed", f"blocks.{layers[-1]}.hook_resid_post", "ln_f.hook_scale"]
              + [f"blocks.{i}.attn.hook_result" for i in layers]
              + ([f"blocks.{i}.hook_mlp_out" for i in layers] if has_mlp else []))
    with no_grad(), record(model, points) as cache:
        model(ids)
    embed = cache["hook_embed"]
    parts, labels = [embed.numpy()], ["embed"]
    if model.config.position in ("learned", "sinusoidal"):
        with no_grad():
            parts.append(model.pos_emb(embed * 0.0).numpy())       # what the positions add to any embedding
        labels.append("pos")
    shape = parts[0].shape
    for i in layers:
        attn = model.blocks[i].attn
        result = cache[f"blocks.{i}.attn.hook_result"].numpy()                          # (B, T, H, D)
        parts += [result[:, :, h] for h in range(attn.num_heads)]
        labels += [f"L{i}H{h}" for h in range(attn.num_heads)]
        if attn.out_proj.bias is not None:
            parts.append(np.broadcast_to(attn.out_proj.bias.numpy(), shape))
            labels.append(f"L{i} attn bias")
        if has_mlp:
            parts.append(cache[f"blocks.{i}.hook_mlp_out"].numpy())
            labels.append(f"L{i} mlp")
    return Decomposition(np.stack(parts), labels, cache[f"blocks.{layers[-1]}.hook_resid_post"].numpy(),
                         cache["ln_f.hook_scale"].numpy())


def direct_logit_attribution(model, ids, token, baseline=None, position=-1):
    """Each part of the final residual's direct contribution to the logit of token (an id, or (B,) ids) at position,
    or to the logit difference token - baseline: (parts, B), with the parts' labels. Through the final LayerNorm
    with its scale frozen at the run's value, so the contributions plus the LayerNorm bias's add up to the logit (or
    the difference). The effect through later layers is not in it: a head's DLA is what it writes straight into the
    logits."""
    parts = decompose_residual(model, ids)
    b = parts.residual.shape[0]
    w_u = _host(model.head.weight)

    def direction(tokens):
        tokens = np.broadcast_to(_host(tokens), (b,))
        return w_u[tokens]                                                             # (B, D)
    d = direction(token) - (0.0 if baseline is None else direction(baseline))
    c = parts.components[:, :, position]                                               # (n, B, D)
    centred = c - c.mean(-1, keepdims=True)
    normed = centred / parts.scale[None, :, position] * _host(model.ln_f.weight)
    return (normed * d).sum(-1), parts.labels
