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


def xavier_uniform_(tensor, gain=1.0):
    fan_out = tensor.shape[0] * math.prod(tensor.shape[2:])
    bound = gain * math.sqrt(6.0 / (fan_in(tensor.shape) + fan_out))
    return uniform_(tensor, -bound, bound)


def default_uniform_(tensor, fan):
    """U(-1/sqrt(fan), 1/sqrt(fan)): what PyTorch's Linear, Conv2d and RNN cells start from."""
    bound = 1.0 / math.sqrt(fan) if fan > 0 else 0.0
    return uniform_(tensor, -bound, bound)
