"""torch.nn.parallel: data parallel training over the ranks of tinyattn.distributed."""
from .distributed import DistributedDataParallel
