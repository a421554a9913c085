"""default_collate: a list of samples as one batch, and default_convert: one sample's arrays as tensors, as
PyTorch's (torch.utils.data._utils.collate, where ported code imports them from; torch.utils.data.default_collate and
default_convert are the same functions)."""
import numbers

import numpy

from .... import backend
from ....creation import tensor
from ....ops import stack
from ....tensor import Tensor


def default_collate(batch):
    """A list of samples as one batch, as PyTorch's default_collate: tensors and NumPy arrays stacked along a new
    dim 0; numbers as torch.tensor reads the list (ints to int64, bools to bool, and a list holding a float among
    ints to the default float dtype), but a list that starts with a Python float to float64; a dict of such per key,
    a tuple or list per position (a list of batches; a namedtuple stays one); strings and bytes left as the list."""
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(batch)
    if isinstance(first, (numpy.ndarray, numpy.generic)):
        if first.dtype.kind in "SaUO":          # strings, bytes, objects: no tensor holds them
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                            f"found {first.dtype}")
        return tensor(numpy.stack(batch))
    if isinstance(first, float):
        return tensor(batch, dtype=backend.float64)
    if isinstance(first, numbers.Integral):
        return tensor(batch)
    if isinstance(first, (str, bytes)):
        return batch
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


def default_convert(sample):
    """One sample's NumPy arrays and scalars as tensors, through dicts, namedtuples, tuples and lists, as PyTorch's
    default_convert: what DataLoader(batch_size=None) gives in place of a batch. Strings and string arrays stay."""
    if isinstance(sample, (numpy.ndarray, numpy.generic)):
        return sample if sample.dtype.kind in "SaUO" else tensor(sample)
    if isinstance(sample, dict):
        return {key: default_convert(value) for key, value in sample.items()}
    if isinstance(sample, tuple) and hasattr(sample, "_fields"):
        return type(sample)(*(default_convert(value) for value in sample))
    if isinstance(sample, (tuple, list)):
        return type(sample)(default_convert(value) for value in sample)
    return sample
