"""Layers that learn their input size from their first input, as torch.nn.LazyLinear and LazyConv2d (d2l's attention
chapters build every layer this way). Until that first call the weight and bias are Parameters with no entries;
the call gives them their shape and PyTorch's initial values in place, so an optimizer made before it already holds
them, and the layer becomes the plain Linear or Conv2d it stands for."""
from ..creation import empty_parameter_data
from ..tensor import no_grad
from . import init
from .layers import Conv2d, Linear
from .module import Module, Parameter


def _unshaped():
    return Parameter(empty_parameter_data((0,)))


def _materialise(layer, x, shape, fan, becomes):
    """Give layer's weight `shape` (and its bias its out size) on x's device, drawn as `becomes` draws them."""
    with no_grad():
        for parameter, size in ((layer.weight, shape), (layer.bias, shape[:1])):
            if parameter is not None:
                parameter.data = empty_parameter_data(size, dtype=parameter.dtype, device=x.device)
                init.default_uniform_(parameter, fan)
    layer.__class__ = becomes


class LazyLinear(Linear):
    """Linear(in_features, out_features) with in_features taken from the last dim of its first input."""

    def __init__(self, out_features, bias=True):
        Module.__init__(self)
        self.in_features, self.out_features = 0, out_features
        self.weight = _unshaped()
        self.bias = _unshaped() if bias else None

    def forward(self, x):
        self.in_features = x.shape[-1]
        _materialise(self, x, (self.out_features, self.in_features), self.in_features, Linear)
        return self.forward(x)                               # now the plain layer's


class LazyConv2d(Conv2d):
    """Conv2d(in_channels, out_channels, ...) with in_channels taken from dim 1 of its first input (N, C, H, W)."""

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, bias=True):
        Module.__init__(self)
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.in_channels, self.out_channels, self.kernel_size = 0, out_channels, (kh, kw)
        self.stride, self.padding = stride, padding
        self.weight = _unshaped()
        self.bias = _unshaped() if bias else None

    def forward(self, x):
        self.in_channels = x.shape[1]
        kh, kw = self.kernel_size
        _materialise(self, x, (self.out_channels, self.in_channels, kh, kw), self.in_channels * kh * kw, Conv2d)
        return self.forward(x)                               # now the plain layer's
