"""DistributedSampler, as torch.utils.data.distributed's: each rank's share of a dataset's indices, for an epoch.

PyTorch's rules: the indices (shuffled by a generator seeded with seed + epoch, the same on every rank, or in
order) are padded by repeating them from the start up to a multiple of the world size, or, with drop_last, cut to
one; rank r takes every num_replicas-th index from r. Call set_epoch(epoch) before each epoch for a new order.
"""
import math

from ... import distributed as dist
from ...backend import Generator
from ...creation import randperm
from .sampler import Sampler


class DistributedSampler(Sampler):

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
        rank = dist.get_rank() if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        if drop_last and len(dataset) % num_replicas != 0:
            self.num_samples = math.ceil((len(dataset) - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(len(dataset) / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        if self.shuffle:
            indices = randperm(len(self.dataset), generator=Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            indices = list(range(len(self.dataset)))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / len(indices)))[:padding] if indices else []
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """The epoch the next iteration shuffles for (every rank must set the same)."""
        self.epoch = epoch
