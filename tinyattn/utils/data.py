"""torch.utils.data for ported code: Dataset, TensorDataset, Subset, random_split and a DataLoader that batches,
shuffles and collates as PyTorch's does, in the calling process.

This is not tinyattn.data (the project's own datasets, plain NumPy arrays); a lesson that batches by hand, where the
batching is what it teaches, keeps doing so. What PyTorch's DataLoader does in worker processes (num_workers > 0)
is refused: batches here are made where they are used.
"""
import math
import numbers

import numpy

from .. import backend
from ..creation import randperm, tensor
from ..ops import stack
from ..tensor import Tensor


class Dataset:
    """A map-style dataset: subclasses define __getitem__(index) and __len__()."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


class TensorDataset(Dataset):
    """Sample i is (t[i] for each tensor t), all tensors having one size along dim 0."""

    def __init__(self, *tensors):
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError("Size mismatch between tensors: TensorDataset needs one size along dim 0, got shapes "
                             + ", ".join(str(t.shape) for t in tensors))
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of dataset at the given indices, in their order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Subsets of the given lengths, drawn without overlap from a random order of dataset. Lengths may be counts that
    add up to len(dataset), or fractions that add up to 1 (each gets floor(fraction * len), the samples left over
    go one each to the first subsets, as PyTorch)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [math.floor(n * fraction) for fraction in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError(f"Sum of input lengths {list(lengths)} does not equal the length of the input dataset ({n})")
    order = randperm(n, generator=generator).tolist()
    starts = numpy.cumsum([0] + list(lengths))
    return [Subset(dataset, order[start:start + length]) for start, length in zip(starts, lengths)]


def default_collate(batch):
    """A list of samples as one batch, as PyTorch's default_collate: tensors and NumPy arrays stacked along a new
    dim 0, Python floats to a float64 tensor, ints to int64, bools to bool; a dict of such per key, a tuple or list
    per position (a list of batches; a namedtuple stays one), strings left as a list."""
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(batch)
    if isinstance(first, (numpy.ndarray, numpy.generic)):
        return tensor(numpy.stack(batch))
    if isinstance(first, bool):
        return tensor(batch, dtype=backend.bool_)
    if isinstance(first, numbers.Integral):
        return tensor(batch, dtype=backend.int64)
    if isinstance(first, numbers.Real):
        return tensor(batch, dtype=backend.float64)
    if isinstance(first, str):
        return list(batch)
    if isinstance(first, dict):
        return {key: default_collate([sample[key] for sample in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(first, (tuple, list)):
        if any(len(sample) != len(first) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(position)) for position in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(first).__name__}")


class DataLoader:
    """Batches of a dataset: DataLoader(dataset, batch_size=1, shuffle=False, drop_last=False, collate_fn=None,
    generator=None). Each pass (epoch) shuffles anew, from generator when one is given, else from the seeded global
    generator (tinyattn.manual_seed). batch_size=None gives the samples one by one, uncollated. pin_memory and
    timeout are accepted and change nothing (there are no workers to wait for, no pages to pin)."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 generator=None, **worker_options):
        if num_workers:
            raise ValueError(f"num_workers must be 0 here, got {num_workers}: tinyattn's DataLoader makes every batch "
                             "in the calling process. Worker processes would each need a copy of the dataset, and "
                             "a GPU's arrays cannot be handed from one process to another")
        used = [name for name, value in dict(worker_options, worker_init_fn=worker_init_fn).items()
                if value not in (None, False, "")]
        if used:
            raise ValueError(f"{', '.join(used)} act on worker processes, and tinyattn's DataLoader has none "
                             "(num_workers is 0)")
        if sampler is not None or batch_sampler is not None:
            raise ValueError("tinyattn's DataLoader has no sampler or batch_sampler: use shuffle=True with a "
                             "generator, or a Subset for a fixed choice of samples")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, bool(shuffle), drop_last
        self.collate_fn = collate_fn or (default_collate if batch_size is not None else (lambda sample: sample))
        self.generator = generator
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout

    def __len__(self):
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        order = randperm(n, generator=self.generator).tolist() if self.shuffle else range(n)
        if self.batch_size is None:
            for i in order:
                yield self.collate_fn(self.dataset[i])
            return
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            yield self.collate_fn([self.dataset[i] for i in order[start:start + self.batch_size]])
