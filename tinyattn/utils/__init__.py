"""torch.utils's everyday part for ported code: tinyattn.utils.data (Dataset, DataLoader, random_split, ...)."""
from . import data
