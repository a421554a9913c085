"""Activation points by name, and a general intervention on them.

The points (nn.HookPoint, identity modules that are not children: state_dict and named_modules are unchanged):

    point                                  shape                       what flows there
    hook_embed                             (B, T, D)                   GPT's token embeddings, before positions
    blocks.{l}.hook_resid_pre              (B, T, D)                   the residual stream entering block l
    blocks.{l}.ln1.hook_scale              (B, T, 1)                   a LayerNorm's sqrt(variance + eps)
    blocks.{l}.attn.hook_q                 (B, heads, T, head_dim)     each head's queries, after the rotary embedding
    blocks.{l}.attn.hook_k                 (B, kv_heads, T, head_dim)  each key head's keys, after it
    blocks.{l}.attn.hook_v                 (B, kv_heads, T, head_dim)  each value head's values
    blocks.{l}.attn.hook_attn_scores       (B, heads, T, S)            scaled and masked (-inf), before the softmax
    blocks.{l}.attn.hook_pattern           (B, heads, T, S)            the attention weights
    blocks.{l}.attn.hook_z                 (B, T, heads, head_dim)     each head's output, before out_proj
    blocks.{l}.attn.hook_result            (B, T, heads, D)            each head's output through out_proj (no bias)
    blocks.{l}.hook_attn_out               (B, T, D)                   attention's output (results + out_proj's bias)
    blocks.{l}.hook_resid_mid              (B, T, D)                   the residual stream after attention
    blocks.{l}.ln2.hook_scale              (B, T, 1)                   the second LayerNorm's sqrt(variance + eps)
    blocks.{l}.mlp.hook_pre                (B, T, hidden)              the MLP's hidden layer before its activation
    blocks.{l}.mlp.hook_post               (B, T, hidden)              the MLP's hidden layer after its activation
    blocks.{l}.hook_mlp_out                (B, T, D)                   the MLP's output
    blocks.{l}.hook_resid_post             (B, T, D)                   the residual stream leaving block l
    ln_f.hook_scale                        (B, T, 1)                   the final LayerNorm's scale

POINTS holds this table as data, and what TransformerLens has at each name (the site makes docs/interpret.md's table
from it; tests hold this docstring and every model family's points to it).

ViT's blocks have the same points (from hook_resid_pre on; its final norm is `norm`). TransformerLens's names are
accepted too where they differ only in a module's name (ln_final -> ln_f). The scores, the pattern (on the flash
path), the results and a LayerNorm's scale are formed only while their point is hooked (need_weights=True hooks the
pattern for its call: attention's weights leave by this point only); the others cost one identity call each.

    with intervene(model, {"blocks.0.attn.hook_pattern": lambda p: p * 0.5}):
        logits = model(ids)

A function gets the point's value and returns its replacement (None keeps it); replace_at changes chosen indices
along one axis (positions, heads) and keeps the rest.
"""
import contextlib
import difflib
import numbers

from .. import backend, nn, ops

# (point, shape, what flows there, what TransformerLens has at that name) of a GPT: the first three are the table of
# the module docstring; {l} is a block's index. docs/interpret.md's table beside TransformerLens is made from all four.
POINTS = (
    ("hook_embed", "(B, T, D)", "GPT's token embeddings, before positions",
     "(B, T, D)"),
    ("blocks.{l}.hook_resid_pre", "(B, T, D)", "the residual stream entering block l",
     "(B, T, D)"),
    ("blocks.{l}.ln1.hook_scale", "(B, T, 1)", "a LayerNorm's sqrt(variance + eps)",
     "(B, T, 1)"),
    ("blocks.{l}.attn.hook_q", "(B, heads, T, head_dim)", "each head's queries, after the rotary embedding",
     "(B, T, heads, head_dim), before RoPE (`hook_rot_q` after)"),
    ("blocks.{l}.attn.hook_k", "(B, kv_heads, T, head_dim)", "each key head's keys, after it",
     "(B, T, kv_heads, head_dim)"),
    ("blocks.{l}.attn.hook_v", "(B, kv_heads, T, head_dim)", "each value head's values",
     "(B, T, kv_heads, head_dim)"),
    ("blocks.{l}.attn.hook_attn_scores", "(B, heads, T, S)", "scaled and masked (-inf), before the softmax",
     "the same"),
    ("blocks.{l}.attn.hook_pattern", "(B, heads, T, S)", "the attention weights",
     "(B, heads, T, S)"),
    ("blocks.{l}.attn.hook_z", "(B, T, heads, head_dim)", "each head's output, before out_proj",
     "(B, T, heads, head_dim)"),
    ("blocks.{l}.attn.hook_result", "(B, T, heads, D)", "each head's output through out_proj (no bias)",
     "(B, T, heads, D), with `use_attn_result`"),
    ("blocks.{l}.hook_attn_out", "(B, T, D)", "attention's output (results + out_proj's bias)",
     "(B, T, D)"),
    ("blocks.{l}.hook_resid_mid", "(B, T, D)", "the residual stream after attention",
     "(B, T, D)"),
    ("blocks.{l}.ln2.hook_scale", "(B, T, 1)", "the second LayerNorm's sqrt(variance + eps)",
     "(B, T, 1)"),
    ("blocks.{l}.mlp.hook_pre", "(B, T, hidden)", "the MLP's hidden layer before its activation",
     "(B, T, d_mlp)"),
    ("blocks.{l}.mlp.hook_post", "(B, T, hidden)", "the MLP's hidden layer after its activation",
     "(B, T, d_mlp)"),
    ("blocks.{l}.hook_mlp_out", "(B, T, D)", "the MLP's output",
     "(B, T, D)"),
    ("blocks.{l}.hook_resid_post", "(B, T, D)", "the residual stream leaving block l",
     "(B, T, D)"),
    ("ln_f.hook_scale", "(B, T, 1)", "the final LayerNorm's scale",
     "(B, T, 1), as `ln_final.hook_scale`"),
)

# TransformerLens's names for modules tinyattn names otherwise (the points' own names are the same)
ALIASES = {"ln_final": "ln_f"}


def point_names(model):
    """Every activation point of model, by dotted name, in the order of its modules."""
    return list(nn.hook_point.named_points(model))


def _canonical(name):
    first, dot, rest = name.partition(".")
    return ALIASES.get(first, first) + dot + rest


def resolve(model, names):
    """{name as given: module} for names that are modules (as named_modules() gives them, shared ones under any of
    their names) or activation points (or their TransformerLens aliases); an unknown name raises, naming the
    nearest."""
    modules = dict(model.named_modules(remove_duplicate=False))
    points = nn.hook_point.named_points(model)
    found = {}
    for name in names:
        canonical = _canonical(name)
        target = modules.get(canonical, points.get(canonical))
        if target is None:
            near = difflib.get_close_matches(canonical, [n for n in list(modules) + list(points) if n], n=5,
                                             cutoff=0.5)
            raise KeyError(f"{type(model).__name__} has no submodule {name!r}"
                           + (f"; the nearest names: {', '.join(map(repr, near))}" if near else "")
                           + " (nor an activation point of that name: interpret.point_names(model) lists them)")
        found[name] = target
    return found


def integer(value, what):
    """value as an int where it is an integer (a Python or NumPy one), else a TypeError naming what it was given for:
    an index of 1.5 must not quietly be 1, nor True be 1 or "1" a character."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


def replace_at(x, replacement, dim, indices):
    """x with replacement (broadcast to x's shape) at indices along dim, x elsewhere (no arithmetic: an -inf score
    stays -inf)."""
    size = x.shape[dim]
    indices = [integer(i, f"an index along dim {dim}") for i in indices]
    wrong = [i for i in indices if not -size <= i < size]
    if wrong:
        raise IndexError(f"index {wrong[0]} is out of range for dim {dim} of size {size} (shape {tuple(x.shape)})")
    xp = backend.xp_of(x.array)
    shape = [1] * x.ndim
    shape[dim] = size
    mask = xp.zeros(size, dtype=bool)
    mask[list(indices)] = True
    return ops.where(mask.reshape(shape), replacement, x)


@contextlib.contextmanager
def intervene(model, functions):
    """A context in which each point or module {name: function} outputs function(value) instead of its value
    (None from the function keeps the value). The hooks come off when the block ends, also on an error."""
    handles = []

    def hook_for(function):
        def hook(module, args, output):
            return function(output)
        return hook

    try:
        for name, module in resolve(model, list(functions)).items():
            if not callable(functions[name]):
                raise TypeError(f"intervene takes a function per point; {name!r} got {type(functions[name]).__name__}")
            handles.append(module.register_forward_hook(hook_for(functions[name])))
        yield model
    finally:
        for handle in handles:
            handle.remove()
