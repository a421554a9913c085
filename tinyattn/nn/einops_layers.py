"""einops's Rearrange and Reduce as modules (what einops.layers.torch gives PyTorch), usable inside nn.Sequential:
`Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=4, p2=4)` cuts images into patch tokens. einops stays
optional: these need it installed (`pip install einops`), and tinyattn/einops_backend.py teaches it tinyattn tensors."""
from .module import Module


def _einops():
    try:
        import einops
    except ImportError as error:
        raise ImportError("Rearrange and Reduce need einops: pip install einops") from error
    return einops


class Rearrange(Module):
    def __init__(self, pattern, **axes_lengths):
        super().__init__()
        _einops()
        self.pattern, self.axes_lengths = pattern, axes_lengths

    def forward(self, x):
        return _einops().rearrange(x, self.pattern, **self.axes_lengths)

    def extra_repr(self):
        return repr(self.pattern) + "".join(f", {k}={v}" for k, v in self.axes_lengths.items())


class Reduce(Module):
    def __init__(self, pattern, reduction, **axes_lengths):
        super().__init__()
        _einops()
        self.pattern, self.reduction, self.axes_lengths = pattern, reduction, axes_lengths

    def forward(self, x):
        return _einops().reduce(x, self.pattern, self.reduction, **self.axes_lengths)

    def extra_repr(self):
        return f"{self.pattern!r}, {self.reduction!r}" + "".join(f", {k}={v}" for k, v in self.axes_lengths.items())
