"""record(model): one forward, every module's output and every attention's weights and heads, by module name.

    with record(model) as cache:
        logits = model(ids)
    cache["blocks.0.mlp"]                 # that module's output (detached)
    cache.attention["blocks.1.attn"]      # (B, H, L, S) weights of an attention module
    cache.heads["blocks.1.attn"]          # (B, L, H, head_dim): each head's output, before out_proj mixes them

The attention modules it sees inside: nn.MultiHeadAttention and PyTorch's nn.MultiheadAttention (ported code uses
it). Another module that attends (Swin's window attention, additive attention) has its output recorded but not its
weights or heads, and record warns, naming it.

Built on forward hooks: they go on when the block starts and come off when it ends, also when it ends in an error.
"""
import contextlib
import difflib
import warnings
from collections.abc import Mapping

from .. import nn
from ..tensor import Tensor


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


def _detached(output):
    if isinstance(output, Tensor):
        return output.detach()
    if isinstance(output, (tuple, list)):
        return type(output)(_detached(x) for x in output)
    return output


def submodules(model, names):
    """{name: module} of model for each of names (any name a module is reachable under); a name that is not one
    raises, naming the nearest ones."""
    modules = dict(model.named_modules(remove_duplicate=False))
    for name in names:
        if name not in modules:
            near = difflib.get_close_matches(name, [n for n in modules if n], n=5, cutoff=0.5)
            raise KeyError(f"{type(model).__name__} has no submodule {name!r}"
                           + (f"; the nearest names: {', '.join(map(repr, near))}" if near else ""))
    return {name: modules[name] for name in names}


# the attention modules whose weights and heads tools can see: each keeps its weights in last_weights when its
# keep_weights is set, and its heads' outputs side by side in the input of its out_proj
ATTENTION = (nn.MultiHeadAttention, nn.MultiheadAttention)


def split_heads(x, attention):
    """The input of an attention module's out_proj as (B, L, H, head_dim): nn.MultiHeadAttention's is (B, L,
    d_model); nn.MultiheadAttention's is (L, B, embed_dim), since it runs sequence first inside, as PyTorch's."""
    if isinstance(attention, nn.MultiheadAttention):
        length, b, _ = x.shape
        return x.reshape(length, b, attention.num_heads, attention.head_dim).transpose(0, 1)
    b, length, _ = x.shape
    return x.reshape(b, length, attention.num_heads, attention.head_dim)


def merge_heads(heads, attention):
    """split_heads undone: (B, L, H, head_dim) back to the layout of the module's out_proj input."""
    if isinstance(attention, nn.MultiheadAttention):
        heads = heads.transpose(0, 1)
    return heads.reshape(heads.shape[0], heads.shape[1], heads.shape[2] * heads.shape[3])


def unseen_attention(modules):
    """The names among modules {name: module} of modules that attend in a way tools cannot see inside: a class
    named *Attention* that is not in ATTENTION and holds none of them (nn.SelfAttention2d holds one)."""
    return [name for name, module in modules.items() if "attention" in type(module).__name__.lower()
            and not any(isinstance(m, ATTENTION) for m in module.modules())]


@contextlib.contextmanager
def record(model, names=None):
    """Record one or more forwards of model inside the block: every module's output, and every attention module's
    weights and per-head outputs (see Recording); names: only these modules (their dotted names, as named_modules()
    gives them). The attention modules keep their weights for the block's length even where the model does not ask
    for them; afterwards the hooks are gone and keep_weights is as it was. Warns naming the modules that attend in a
    way it cannot see inside (their outputs are recorded, their weights and heads not)."""
    if isinstance(names, str):
        names = [names]
    modules = dict(model.named_modules()) if names is None else submodules(model, names)
    unseen = unseen_attention(modules)
    if unseen:
        warnings.warn(f"record sees the weights and heads of {', '.join(c.__name__ for c in ATTENTION)} only; "
                      f"{', '.join(f'{n!r} ({type(modules[n]).__name__})' for n in unseen[:5])}"
                      f"{' and more' if len(unseen) > 5 else ''}: output recorded, weights and heads not",
                      stacklevel=3)
    cache = Recording()
    handles, switched = [], []

    def keep_output(name):
        def hook(module, args, output):
            cache.outputs[name] = _detached(output)
            if isinstance(module, ATTENTION):
                cache.attention[name] = module.last_weights.detach()
        return hook

    def keep_heads(name, attention):
        def hook(module, args):
            cache.heads[name] = split_heads(args[0].detach(), attention)
        return hook

    try:
        for name, module in modules.items():
            handles.append(module.register_forward_hook(keep_output(name)))
            if isinstance(module, ATTENTION):
                switched.append((module, module.keep_weights))
                module.keep_weights = True
                handles.append(module.out_proj.register_forward_pre_hook(keep_heads(name, module)))
        yield cache
    finally:
        for handle in handles:
            handle.remove()
        for module, keep in reversed(switched):        # a module switched twice ends as it was before the first
            module.keep_weights = keep
