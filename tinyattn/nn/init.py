"""Weight initialisation in place, drawn from the seeded generator of the tensor's device (torch.nn.init names)."""
import math

from .. import backend


def _draw(tensor, sample):
    return _fill(tensor, sample(backend.generator(tensor.device)))


def _fill(tensor, values):
    """Write values into the tensor's memory, outside any graph (as torch.nn.init does under no_grad)."""
    tensor.array[...] = values
    tensor._mark_modified()
    return tensor


def uniform_(tensor, a=0.0, b=1.0):
    return _draw(tensor, lambda rng: a + (b - a) * rng.random(tensor.shape))


def normal_(tensor, mean=0.0, std=1.0):
    return _draw(tensor, lambda rng: mean + std * rng.standard_normal(tensor.shape))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal draws, redrawn until every value lies in [a, b] (as timm and PyTorch use for ViT weights)."""
    def sample(rng):
        values = mean + std * rng.standard_normal(tensor.shape)
        outside = (values < a) | (values > b)
        while bool(outside.any()):
            values = backend.xp_of(values).where(outside, mean + std * rng.standard_normal(tensor.shape), values)
            outside = (values < a) | (values > b)
        return values
    return _draw(tensor, sample)


def zeros_(tensor):
    return _fill(tensor, 0)


def ones_(tensor):
    return _fill(tensor, 1)


def fan_in(shape):
    """Inputs feeding one output: in_features for a (out, in) weight, in_channels * kh * kw for a conv kernel."""
    return math.prod(shape[1:]) if len(shape) > 1 else shape[0]


def fan_out(shape):
    """Outputs one input feeds: out_features for a (out, in) weight, out_channels * kh * kw for a conv kernel."""
    return shape[0] * math.prod(shape[2:])


def xavier_uniform_(tensor, gain=1.0):
    bound = gain * math.sqrt(6.0 / (fan_in(tensor.shape) + fan_out(tensor.shape)))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in(tensor.shape) + fan_out(tensor.shape))))


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan = fan_in(tensor.shape) if mode == "fan_in" else fan_out(tensor.shape)
    gain = {"relu": math.sqrt(2.0), "linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3,
            "leaky_relu": math.sqrt(2.0 / (1 + a * a))}.get(nonlinearity)
    if gain is None:
        raise ValueError(f"unknown nonlinearity {nonlinearity!r}")
    return gain / math.sqrt(fan)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """N(0, std^2) with std = gain / sqrt(fan) (He et al. 2015), as torch.nn.init.kaiming_normal_."""
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """U(-b, b) with b = sqrt(3) * gain / sqrt(fan), as torch.nn.init.kaiming_uniform_."""
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def constant_(tensor, val):
    return _fill(tensor, val)


def orthogonal_(tensor, gain=1.0):
    """A (semi-)orthogonal matrix from the QR decomposition of a Gaussian one (Saxe et al. 2013), rows flattened
    past the first dim, as torch.nn.init.orthogonal_."""
    rows = tensor.shape[0]
    cols = math.prod(tensor.shape[1:])
    xp = backend.xp_for(tensor.device.type)
    flat = backend.generator(tensor.device.type).standard_normal((max(rows, cols), min(rows, cols)))
    q, r = xp.linalg.qr(flat)
    q *= xp.sign(xp.diagonal(r))                              # a uniform draw, not one biased by QR's signs
    q = q if rows >= cols else q.T
    return _fill(tensor, gain * q.reshape(tensor.shape))


def default_uniform_(tensor, fan):
    """U(-1/sqrt(fan), 1/sqrt(fan)): what PyTorch's Linear, Conv2d and RNN cells start from."""
    bound = 1.0 / math.sqrt(fan) if fan > 0 else 0.0
    return uniform_(tensor, -bound, bound)
