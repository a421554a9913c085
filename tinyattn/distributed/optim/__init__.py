"""torch.distributed.optim: optimizers whose state is spread over the ranks."""
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer
