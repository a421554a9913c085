"""Change chosen heads' outputs in a forward, then put the model back: ablation (zero or mean) and activation
patching (a head's output taken from another run).

    with ablate_heads(model, {"blocks.1.attn": [0, 2]}):              # heads 0 and 2 of that layer contribute 0
        logits = model(ids)
    with patch_heads(model, {"blocks.1.attn": [3]}, source=cache):    # head 3 as it was in the recorded run
        logits = model(ids)

A head's contribution to the residual stream is out_proj applied to its slice of out_proj's input (out_proj is
linear, so the heads' contributions add up, plus the bias). Both contexts replace that slice, the head's z, at the
attention module's point hook_z (with points.intervene), so they change that head's contribution and nothing else.
"""
import numbers

from .points import integer, intervene, replace_at, resolve
from .recording import ATTENTION, Recording


def _chosen(model, heads_by_name):
    """[(name, attention module, sorted head indices)] for {name: heads (a list of indices, or one)}, checked."""
    chosen = []
    for name, module in resolve(model, list(heads_by_name)).items():
        if not isinstance(module, ATTENTION):
            raise TypeError(f"{name!r} is a {type(module).__name__}, which has no heads tools can change; they "
                            "change the heads of tinyattn's nn.Attention and of PyTorch's "
                            "nn.MultiheadAttention")
        heads = heads_by_name[name]
        one = isinstance(heads, (numbers.Number, str))
        heads = sorted({integer(h, f"a head index of {name!r}") for h in ([heads] if one else heads)})
        wrong = [h for h in heads if not 0 <= h < module.num_heads]
        if wrong:
            raise IndexError(f"{name!r} has {module.num_heads} heads (0 to {module.num_heads - 1}), got head "
                             f"{wrong[0]}")
        chosen.append((name, module, heads))
    return chosen


def _check_recording(cache, argument):
    if not isinstance(cache, Recording):
        raise TypeError(f"{argument} must be a Recording (with interpret.record(model) as cache: model(ids)), got "
                        f"{type(cache).__name__}")


def _recorded_heads(cache, name, argument):
    if name not in cache.heads:
        raise KeyError(f"{argument} holds no heads of {name!r}; it holds those of {list(cache.heads)} (record a run "
                       "with record(model) and that module among names)")
    return cache.heads[name]


def _replacing(model, heads_by_name, replacement):
    """A context in which each chosen head h of z (B, L, H, head_dim) at an attention's hook_z becomes
    replacement(name, z)[..., h, :]; the other heads pass unchanged."""
    def function_for(name, chosen):
        return lambda z: replace_at(z, replacement(name, z), 2, chosen)
    return intervene(model, {f"{name}.hook_z": function_for(name, chosen)
                             for name, _, chosen in _chosen(model, heads_by_name)})


def ablate_heads(model, heads_by_name, how="zero", mean_from=None):
    """A context in which the heads {attention name: [head, ...] or head} are ablated: how="zero" sets their outputs
    to 0; how="mean" replaces each by its mean over batch and positions of the run recorded in mean_from (a
    Recording: a fixed mean, the usual choice), or, where mean_from is None, of the current forward's input.

    On a causal model (one whose is_causal is True, as models.GPT's) how="mean" needs mean_from: a mean over the
    current input's positions carries later tokens into earlier positions' outputs, so the ablated model would no
    longer be causal (and over a batch of one sequence, a per-position mean would be the head's own output:
    nothing ablated)."""
    if how not in ("zero", "mean"):
        raise ValueError(f"how must be 'zero' or 'mean', got {how!r}")
    if mean_from is not None and how != "mean":
        raise ValueError("mean_from is for how='mean'")
    if mean_from is not None:
        _check_recording(mean_from, "mean_from")
    if how == "mean" and mean_from is None and getattr(model, "is_causal", False):
        raise ValueError(f"{type(model).__name__} is causal: a mean over this input's positions would let later "
                         "tokens change earlier outputs. Record a run for the mean first: with "
                         "interpret.record(model) as cache: model(reference_ids); then ablate_heads(model, heads, "
                         "how='mean', mean_from=cache)")

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
    _check_recording(source, "source")
    for name in heads_by_name:
        _recorded_heads(source, name, "source")

    def replacement(name, heads):
        recorded = _recorded_heads(source, name, "source")
        if tuple(recorded.shape) != tuple(heads.shape):
            raise ValueError(f"source's heads of {name!r} are (B, L, H, head_dim) = {tuple(recorded.shape)}, this "
                             f"run's {tuple(heads.shape)}: patch from a run on inputs of the same shape")
        return recorded
    return _replacing(model, heads_by_name, replacement)
