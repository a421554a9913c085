"""DataLoader as torch.utils.data.dataloader's: batches of a dataset, read in the order of a sampler and collated,
in the calling process. What PyTorch's DataLoader does in worker processes (num_workers > 0) is refused: batches
here are made where they are used."""
from ._utils.collate import default_collate, default_convert
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "default_collate"]        # default_collate here too, as torch.utils.data.dataloader has it


class DataLoader:
    """Batches of a dataset: DataLoader(dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
    collate_fn=None, drop_last=False, generator=None), as PyTorch's. The indices come from sampler (any iterable of
    indices), else from a RandomSampler when shuffle (a new order each pass, drawn from generator or the seeded
    global generator), else in order; batch_size of them at a time make a batch, or batch_sampler gives each batch's
    indices itself. batch_size=None gives the samples one by one, uncollated, their arrays as tensors
    (default_convert). pin_memory and timeout are accepted and change nothing (there are no workers to wait for, no
    pages to pin)."""

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
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.collate_fn = collate_fn or (default_collate if batch_sampler is not None else default_convert)
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout

    def __len__(self):
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def __iter__(self):
        if self.batch_sampler is None:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])
            return
        for indices in self.batch_sampler:
            yield self.collate_fn([self.dataset[i] for i in indices])
