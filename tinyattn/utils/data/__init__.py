"""torch.utils.data for ported code, laid out as PyTorch's package: dataset.py (Dataset, TensorDataset, Subset,
random_split), sampler.py (the samplers), distributed.py (DistributedSampler), dataloader.py (DataLoader) and
_utils/collate.py (default_collate, default_convert), so
`from torch.utils.data.dataloader import DataLoader` ports as `from tinyattn.utils.data.dataloader import DataLoader`.

This is not tinyattn.datasets (the project's own datasets, plain NumPy arrays); a lesson that batches by hand, where
the batching is what it teaches, keeps doing so.
"""
from ._utils.collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import Dataset, Subset, TensorDataset, random_split
from .distributed import DistributedSampler
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)

__all__ = ["BatchSampler", "DataLoader", "Dataset", "DistributedSampler", "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset", "WeightedRandomSampler",
           "default_collate", "default_convert", "random_split"]
