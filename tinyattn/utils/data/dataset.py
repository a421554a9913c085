"""Datasets as torch.utils.data.dataset: Dataset, TensorDataset, Subset and random_split."""
import math
import warnings

import numpy

from ...creation import randperm


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
    add up to len(dataset), or fractions in [0, 1] that add up to 1 (each gets floor(fraction * len), the samples
    left over go one each to the first subsets, and an empty subset warns, as PyTorch)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, fraction in enumerate(lengths):
            if not 0 <= fraction <= 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1: random_split got {list(lengths)}")
        counts = [math.floor(n * fraction) for fraction in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.")
        lengths = counts
    if sum(lengths) != n:
        raise ValueError(f"Sum of input lengths {list(lengths)} does not equal the length of the input dataset ({n})")
    order = randperm(n, generator=generator).tolist()
    starts = numpy.cumsum([0] + list(lengths))
    return [Subset(dataset, order[start:start + length]) for start, length in zip(starts, lengths)]
