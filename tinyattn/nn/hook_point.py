"""Activation points: named places inside a module where tools that look inside a model (tinyattn.interpret) can
read or change what flows past, as TransformerLens's HookPoints.

A HookPoint is the identity. A module gives itself points with add_points(self, "q", "k", ...): each is reachable
as self.hook_q, ..., but kept outside the module's children, so named_modules(), state_dict() and print(model) are
as they were and a plain forward pays one identity call per point. A value that costs work to form (a head's result,
the attention scores on the flash path, a LayerNorm's scale) is formed only where its point is hooked.
"""
import contextlib

from .module import Module

# a Transformer block's points: the residual stream before it, after attention and after the MLP, and what attention
# and the MLP add to it (a block without an MLP never calls hook_mlp_out; its resid_post is its resid_mid)
RESIDUAL_POINTS = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")


class HookPoint(Module):
    """The identity, at a named place; interpret puts forward hooks on it to record or replace the value."""

    kept = None

    def forward(self, x):
        return x

    @property
    def hooked(self):
        """True while a hook is on this point: then the module forms the value if it costs work to form."""
        return bool(self._forward_hooks or self._forward_pre_hooks)

    @contextlib.contextmanager
    def keeping(self, enabled=True):
        """While the block is open (and enabled), a hook on this point keeps each value that passes it, detached, in
        self.kept, which stays after the block (None until a value is kept). Being a hook, it makes the module form
        the value as any hook does; hooks put on before it may have changed the value: it keeps what flows on."""
        if not enabled:
            yield
            return
        handle = self.register_forward_hook(lambda point, args, value: setattr(point, "kept", value.detach()))
        try:
            yield
        finally:
            handle.remove()


def add_points(module, *names):
    """module.hook_<name> for each name, a HookPoint that is not a child (see the module docstring)."""
    for name in names:
        object.__setattr__(module, f"hook_{name}", HookPoint())
    object.__setattr__(module, "hook_point_names", getattr(module, "hook_point_names", ()) + names)


def named_points(model):
    """{dotted name: HookPoint} of every point in model, in named_modules() order: "blocks.0.attn.hook_q", ...; a
    module reachable under several names has its points under each."""
    points = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for name in getattr(module, "hook_point_names", ()):
            points[f"{prefix}.hook_{name}" if prefix else f"hook_{name}"] = getattr(module, f"hook_{name}")
    return points
