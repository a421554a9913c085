"""record(model): one forward, every module's output and every attention's weights and heads, by module name.

    with record(model) as cache:
        logits = model(ids)
    cache["blocks.0.mlp"]                 # that module's output (detached)
    cache.attention["blocks.1.attn"]      # (B, H, L, S) weights of an attention module
    cache.heads["blocks.1.attn"]          # (B, L, H, head_dim): each head's output, before out_proj mixes them

    with record(model, ["blocks.0.attn.hook_pattern", "blocks.1.hook_resid_mid"]) as cache:   # activation points
        logits = model(ids)                                                                  # (points.py lists them)

The attention modules it sees inside: nn.Attention and PyTorch's nn.MultiheadAttention (ported code uses
it). Another module that attends (Swin's window attention, additive attention) has its output recorded but not its
weights or heads, and record warns, naming it.

Built on forward hooks: they go on when the block starts and come off when it ends, also when it ends in an error.
keep_graph=True keeps the recorded values in the model's graph (each retains its gradient): after a backward from a
metric, cache[name].grad is the metric's gradient at that point (attribution patching).
"""
import contextlib
import warnings
from collections.abc import Mapping

from .. import nn
from ..tensor import Tensor
from .points import resolve


class Recording(Mapping):
    """What one `with record(model) as cache:` block saw, by module name ("" is the model itself). cache[name]: the
    module's output, detached; cache.attention[name]: the (B, H, L, S) attention weights of an attention module
    (ATTENTION); cache.heads[name]: the input of its out_proj split by head, (B, L, H, head_dim), head h's output.
    A module called more than once in the block keeps its last call's; one reachable under two names (nn.Sequential(a,
    a), layers shared across depth) is recorded under the first, as named_modules() lists it."""

    def __init__(self):
        self.outputs, self.attention, self.heads = {}, {}, {}

    def __getitem__(self, name):
        if name not in self.outputs:
            raise KeyError(f"nothing was recorded for {name!r}; recorded: {_some(self.outputs)}")
        return self.outputs[name]

    def __iter__(self):
        return iter(self.outputs)

    def __len__(self):
        return len(self.outputs)

    def __repr__(self):
        return (f"Recording({len(self.outputs)} outputs, attention of {list(self.attention)}, heads of "
                f"{list(self.heads)})")


def _some(names, limit=12):
    names = list(names)
    return ", ".join(map(repr, names[:limit])) + (f" and {len(names) - limit} more" if len(names) > limit else "") \
        if names else "nothing (did the block run the model?)"


def _kept(output, keep_graph):
    if isinstance(output, Tensor):
        return output.retain_grad() if keep_graph else output.detach()
    if isinstance(output, (tuple, list)):
        return type(output)(_kept(x, keep_graph) for x in output)
    return output


# the attention modules whose weights and heads tools can see: each passes its weights (B, H, L, S) through its point
# hook_pattern and its heads' outputs (B, L, H, head_dim) through its point hook_z
ATTENTION = (nn.Attention, nn.MultiheadAttention)


def unseen_attention(modules):
    """The names among modules {name: module} of modules that attend in a way tools cannot see inside: a class
    named *Attention* that is not in ATTENTION and holds none of them (nn.SelfAttention2d holds one)."""
    return [name for name, module in modules.items() if "attention" in type(module).__name__.lower()
            and not any(isinstance(m, ATTENTION) for m in module.modules())]


@contextlib.contextmanager
def record(model, names=None, keep_graph=False):
    """Record one or more forwards of model inside the block: every module's output, and every attention module's
    weights and per-head outputs (see Recording); names: only these modules (their dotted names, as named_modules()
    gives them) or activation points (points.py). The attention modules' weights are recorded at their hook_pattern,
    also where the model does not ask for them (the module then forms them in the open); afterwards the hooks are
    gone. Warns
    naming the modules that attend in a way it cannot see inside (their outputs are recorded, their weights and heads
    not). keep_graph=True: the values stay in the graph and keep their gradients (see the module docstring)."""
    if isinstance(names, str):
        names = [names]
    modules = dict(model.named_modules()) if names is None else resolve(model, names)
    unseen = unseen_attention(modules)
    if unseen:
        warnings.warn(f"record sees the weights and heads of {', '.join(f'nn.{c.__name__}' for c in ATTENTION)} only; "
                      f"{', '.join(f'{n!r} ({type(modules[n]).__name__})' for n in unseen[:5])}"
                      f"{' and more' if len(unseen) > 5 else ''}: output recorded, weights and heads not",
                      stacklevel=3)
    cache = Recording()
    handles = []

    def keep_in(kept, name, graph):
        def hook(module, args, output):
            kept[name] = _kept(output, graph)
        return hook

    try:
        for name, module in modules.items():
            handles.append(module.register_forward_hook(keep_in(cache.outputs, name, keep_graph)))
            if isinstance(module, ATTENTION):
                handles.append(module.hook_pattern.register_forward_hook(keep_in(cache.attention, name, False)))
                handles.append(module.hook_z.register_forward_hook(keep_in(cache.heads, name, keep_graph)))
        yield cache
    finally:
        for handle in handles:
            handle.remove()
