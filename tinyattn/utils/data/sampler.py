"""Samplers as torch.utils.data.sampler: what order a DataLoader reads a dataset's indices in, and how it groups them
into batches. Each draws from its generator when given one, else from the seeded global generator
(tinyattn.manual_seed), and draws anew on every pass (epoch)."""
import math

from ... import backend
from ...creation import as_tensor, multinomial, randint, randperm


def _positive_int(name, value):
    """PyTorch's check on counts: an int above 0, and not a bool (batch_size=True is refused, not read as 1)."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value}")


class Sampler:
    """The base of every sampler: a subclass yields indices from __iter__ and, when it knows how many, gives their
    count from __len__ (DataLoader's len() needs it)."""

    def __init__(self, data_source=None):
        """data_source is taken and unused, as PyTorch's: samplers written for older PyTorch still pass it up."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __len__(self):
        raise TypeError(f"{type(self).__name__} defines no __len__, so the number of indices it yields is unknown")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1, in order."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """num_samples indices of data_source (len(data_source) unless told), in a random order. Without replacement
    each pass is a permutation, and num_samples beyond len(data_source) takes whole permutations one after another
    (each index then appears once per permutation); with replacement each index is drawn independently."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator
        _positive_int("num_samples", self.num_samples)             # an empty data_source too, as PyTorch

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        if self.replacement:      # 32 at a time, as PyTorch: makemore asks for num_samples=int(1e10)
            for start in range(0, self.num_samples, 32):
                yield from randint(n, (min(32, self.num_samples - start),), generator=self.generator).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from randperm(n, generator=self.generator).tolist()
        if self.num_samples % n:
            yield from randperm(n, generator=self.generator).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices, in a random order drawn anew each pass."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices 0..len(weights)-1, index i drawn with probability weights[i] / sum(weights) (torch.
    multinomial's draw): with replacement by default, so an index may come more than once."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        _positive_int("num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        self.weights = as_tensor(weights, dtype=backend.float64)
        if self.weights.ndim != 1:
            raise ValueError("weights should be a 1d sequence but given weights have shape "
                             f"{tuple(self.weights.shape)}")
        self.num_samples, self.replacement, self.generator = num_samples, replacement, generator

    def __iter__(self):
        return iter(multinomial(self.weights, self.num_samples, self.replacement, generator=self.generator).tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """The indices of sampler in lists of batch_size; the last, shorter list is kept unless drop_last."""

    def __init__(self, sampler, batch_size, drop_last):
        _positive_int("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        count = len(self.sampler)
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)
