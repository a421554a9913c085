"""Change chosen heads' outputs in a forward, then put the model back: ablation (zero or mean) and activation
patching (a head's output taken from another run).

    with ablate_heads(model, {"blocks.1.attn": [0, 2]}):              # heads 0 and 2 of that layer contribute 0
        logits = model(ids)
    with patch_heads(model, {"blocks.1.attn": [3]}, source=cache):    # head 3 as it was in the recorded run
        logits = model(ids)

A head's contribution to the residual stream is out_proj applied to its slice of out_proj's input (out_proj is
linear, so the heads' contributions add up, plus the bias). Both contexts replace that slice, with a forward
pre-hook on out_proj, so they change that head's contribution and nothing else.
"""
import contextlib

from .. import backend, nn
from ..tensor import Tensor
from .recording import split_heads, submodules


def _chosen(model, heads_by_name):
    """[(name, attention module, sorted head indices)] for {name: heads}, checked."""
    chosen = []
    for name, module in submodules(model, list(heads_by_name)).items():
        if not isinstance(module, nn.MultiHeadAttention):
            raise TypeError(f"{name!r} is a {type(module).__name__}, not an nn.MultiHeadAttention: heads can be "
                            "changed only in one")
        heads = sorted({int(h) for h in heads_by_name[name]})
        wrong = [h for h in heads if not 0 <= h < module.num_heads]
        if wrong:
            raise IndexError(f"{name!r} has {module.num_heads} heads (0 to {module.num_heads - 1}), got head "
                             f"{wrong[0]}")
        chosen.append((name, module, heads))
    return chosen


def _recorded_heads(cache, name, argument):
    if name not in cache.heads:
        raise KeyError(f"{argument} holds no heads of {name!r}; it holds those of {list(cache.heads)} (record a run "
                       "with record(model) and that module among names)")
    return cache.heads[name]


@contextlib.contextmanager
def _replacing(model, heads_by_name, replacement):
    """In the block, each chosen head's slice h of out_proj's input becomes replacement(name, heads)[..., h, :],
    heads being that input as (B, L, H, head_dim); the other heads pass unchanged."""
    handles = []

    def hook_for(name, attention, chosen):
        def hook(module, args):
            heads = split_heads(args[0], attention)
            xp = backend.xp_of(heads.array)
            keep = xp.ones((attention.num_heads, 1), dtype=heads.dtype)
            keep[chosen] = 0
            keep = Tensor(keep)
            changed = heads * keep + replacement(name, heads) * (1.0 - keep)
            return (changed.reshape(args[0].shape),) + tuple(args[1:])
        return hook

    try:
        for name, attention, chosen in _chosen(model, heads_by_name):
            handles.append(attention.out_proj.register_forward_pre_hook(hook_for(name, attention, chosen)))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def ablate_heads(model, heads_by_name, how="zero", mean_from=None):
    """A context in which the heads {attention name: [head, ...]} are ablated: how="zero" sets their outputs to 0;
    how="mean" replaces each by its mean over batch and positions, of the current forward's input or, with
    mean_from=a Recording, of the recorded run's (a fixed mean, the usual choice when ablating on single inputs)."""
    if how not in ("zero", "mean"):
        raise ValueError(f"how must be 'zero' or 'mean', got {how!r}")
    if mean_from is not None and how != "mean":
        raise ValueError("mean_from is for how='mean'")

    def replacement(name, heads):
        if how == "zero":
            return heads * 0.0
        source = heads if mean_from is None else _recorded_heads(mean_from, name, "mean_from")
        mean = source.mean(dim=(0, 1), keepdim=True)                          # (1, 1, H, head_dim)
        if mean.shape[-2:] != heads.shape[-2:]:
            raise ValueError(f"mean_from's heads of {name!r} are {tuple(source.shape)}, this run's "
                             f"{tuple(heads.shape)}: (H, head_dim) must agree")
        return mean
    return _replacing(model, heads_by_name, replacement)


def patch_heads(model, heads_by_name, source):
    """A context in which the heads {attention name: [head, ...]} output what they output in the run recorded in
    source (a Recording of the same model on inputs of the same shape): activation patching."""
    for name in heads_by_name:
        _recorded_heads(source, name, "source")

    def replacement(name, heads):
        recorded = _recorded_heads(source, name, "source")
        if tuple(recorded.shape) != tuple(heads.shape):
            raise ValueError(f"source's heads of {name!r} are (B, L, H, head_dim) = {tuple(recorded.shape)}, this "
                             f"run's {tuple(heads.shape)}: patch from a run on inputs of the same shape")
        return recorded
    return _replacing(model, heads_by_name, replacement)
