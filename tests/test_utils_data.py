"""tinyattn.utils.data, torch.utils.data for ported code (issues 46 and 55): Dataset, TensorDataset, Subset,
random_split, the samplers and DataLoader, held to PyTorch's documented behaviour (written down here: PyTorch is never
a dependency)."""
import warnings
from collections import Counter, namedtuple

import numpy as np
import pytest

import tinyattn as torch
from tinyattn.utils.data import (BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler,
                                 SequentialSampler, Subset, SubsetRandomSampler, TensorDataset, WeightedRandomSampler,
                                 default_collate, random_split)

from conftest import host


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([i, i * i]), i % 2


def test_batches_in_order_with_the_last_one_short_unless_dropped():
    loader = DataLoader(Squares(7), batch_size=3)
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3
    x, y = batches[0]
    assert host(x).tolist() == [[0, 0], [1, 1], [2, 4]] and host(y).tolist() == [0, 1, 0] and y.dtype == np.int64
    assert batches[-1][0].shape == (1, 2)
    dropped = DataLoader(Squares(7), batch_size=3, drop_last=True)
    assert len(dropped) == 2 and [b[0].shape[0] for b in dropped] == [3, 3]
    assert len(DataLoader(Squares(6), batch_size=3, drop_last=True)) == 2


def test_shuffle_draws_a_new_order_each_pass_and_a_seeded_generator_repeats_it():
    def epochs(generator):
        loader = DataLoader(TensorDataset(torch.arange(20)), batch_size=5, shuffle=True, generator=generator)
        return [[i for (batch,) in loader for i in host(batch).tolist()] for _ in range(2)]
    first, second = epochs(torch.Generator().manual_seed(7))
    assert sorted(first) == list(range(20)) and sorted(second) == list(range(20))
    assert first != list(range(20)) and first != second                        # shuffled, anew each pass
    assert epochs(torch.Generator().manual_seed(7)) == [first, second]          # the same seed, the same orders
    torch.manual_seed(3)
    unseeded = epochs(None)
    torch.manual_seed(3)
    assert epochs(None) == unseeded                                            # the global seed, without a generator
    assert torch.Generator().manual_seed(7).initial_seed() == 7


def test_default_collate_of_tuples_dicts_numbers_arrays_and_strings():
    Pair = namedtuple("Pair", "a b")
    samples = [{"x": np.array([1.0, 2.0]), "n": 3, "f": 0.5, "flag": True, "name": "a", "pair": Pair(1, 2.0)},
               {"x": np.array([3.0, 4.0]), "n": 4, "f": 1.5, "flag": False, "name": "b", "pair": Pair(3, 4.0)}]
    batch = next(iter(DataLoader(samples, batch_size=2)))
    assert host(batch["x"]).tolist() == [[1, 2], [3, 4]] and batch["x"].dtype == np.float64
    assert batch["n"].dtype == np.int64 and host(batch["n"]).tolist() == [3, 4]
    assert batch["f"].dtype == np.float64 and batch["flag"].dtype == bool                # Python floats: float64
    assert batch["name"] == ["a", "b"]
    assert isinstance(batch["pair"], Pair) and host(batch["pair"].a).tolist() == [1, 3]
    lists = next(iter(DataLoader([(1, [2, 3]), (4, [5, 6])], batch_size=2)))
    assert isinstance(lists, list) and host(lists[0]).tolist() == [1, 4]                 # a tuple gives a list
    assert [host(t).tolist() for t in lists[1]] == [[2, 5], [3, 6]]


def test_collate_fn_and_batch_size_none():
    loader = DataLoader(list(range(5)), batch_size=2, collate_fn=lambda batch: sum(batch))
    assert list(loader) == [1, 5, 4]
    assert list(DataLoader(["a", "b"], batch_size=None)) == ["a", "b"]                 # samples one by one


def test_tensor_dataset_subset_and_random_split():
    ds = TensorDataset(torch.arange(10), torch.arange(10) * 10)
    assert len(ds) == 10 and [host(t).item() for t in ds[3]] == [3, 30]
    with pytest.raises(ValueError, match=r"Size mismatch between tensors.*\(10,\), \(9,\)"):
        TensorDataset(torch.arange(10), torch.arange(9))
    sub = Subset(ds, [9, 2])
    assert len(sub) == 2 and host(sub[0][0]).item() == 9 and len(sub[[0, 1]]) == 2
    a, b = random_split(ds, [7, 3], generator=torch.Generator().manual_seed(42))
    assert (len(a), len(b)) == (7, 3) and sorted(a.indices + b.indices) == list(range(10))
    again = random_split(ds, [7, 3], generator=torch.Generator().manual_seed(42))
    assert again[0].indices == a.indices
    parts = random_split(range(10), [0.5, 0.3, 0.2])
    assert [len(p) for p in parts] == [5, 3, 2]
    assert [len(p) for p in random_split(range(11), [0.5, 0.5])] == [6, 5]     # the one left over goes to the first
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [5, 4])


def test_worker_processes_are_refused_saying_why():
    with pytest.raises(ValueError, match="num_workers must be 0 here, got 2: .* in the calling process"):
        DataLoader(Squares(3), num_workers=2)
    with pytest.raises(ValueError, match="persistent_workers act on worker processes"):
        DataLoader(Squares(3), persistent_workers=True)
    assert len(DataLoader(Squares(3), num_workers=0, persistent_workers=False, prefetch_factor=None)) == 3
    with pytest.raises(NotImplementedError, match="must define __getitem__"):
        Dataset()[0]


def test_it_is_also_torch_utils_data():
    assert torch.utils.data.DataLoader is DataLoader
    import tinyattn.datasets                                                   # the project's datasets stay apart
    assert not hasattr(tinyattn.datasets, "DataLoader")


def test_the_package_has_pytorchs_submodules():
    from tinyattn.utils.data._utils.collate import default_collate as from_utils
    from tinyattn.utils.data.dataloader import DataLoader as from_dataloader, default_collate as from_loader
    from tinyattn.utils.data.dataset import Dataset as from_dataset
    from tinyattn.utils.data.sampler import RandomSampler as from_sampler
    assert (from_dataloader, from_dataset, from_sampler) == (DataLoader, Dataset, RandomSampler)
    assert from_utils is from_loader is default_collate


def test_arguments_are_refused_with_pytorchs_words():
    refused = {"sampler option is mutually exclusive with shuffle": dict(sampler=[0, 1], shuffle=True),
               "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last":
                   dict(batch_sampler=[[0, 1]], batch_size=2),
               "batch_size=None option disables auto-batching and is mutually exclusive with drop_last":
                   dict(batch_size=None, drop_last=True),
               r"batch_size should be a positive integer value, but got batch_size=0": dict(batch_size=0),
               r"batch_size should be a positive integer value, but got batch_size=True": dict(batch_size=True)}
    for message, arguments in refused.items():
        with pytest.raises(ValueError, match=message):
            DataLoader(Squares(3), **arguments)
    for arguments in (dict(shuffle=True), dict(sampler=[0]), dict(drop_last=True)):
        with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
            DataLoader(Squares(3), batch_sampler=[[0, 1]], **arguments)
    with pytest.raises(ValueError, match="drop_last should be a boolean value, but got drop_last=1"):
        BatchSampler(range(3), 2, drop_last=1)
    with pytest.raises(ValueError, match="num_samples should be a positive integer value, but got num_samples=0"):
        RandomSampler(range(0))                                                # an empty dataset, shuffled
    with pytest.raises(TypeError, match="replacement should be a boolean value, but got replacement=1"):
        RandomSampler(range(3), replacement=1)
    with pytest.raises(ValueError, match=r"weights should be a 1d sequence but given weights have shape \(1, 2\)"):
        WeightedRandomSampler([[1.0, 2.0]], 2)


def test_sequential_and_batch_samplers():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3] and len(SequentialSampler("abc")) == 3
    assert list(BatchSampler(SequentialSampler(range(7)), 3, False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2


def test_random_sampler_permutes_repeats_permutations_or_draws_with_replacement():
    seed = torch.Generator().manual_seed
    once = list(RandomSampler(range(10), generator=seed(1)))
    assert sorted(once) == list(range(10)) and once != list(range(10))
    longer = list(RandomSampler(range(4), num_samples=10, generator=seed(1)))
    assert len(longer) == 10 and sorted(longer[:4]) == sorted(longer[4:8]) == [0, 1, 2, 3]   # whole permutations
    assert len(set(longer[8:])) == 2                                                        # then a part of one
    drawn = list(RandomSampler(range(3), replacement=True, num_samples=60, generator=seed(1)))
    assert len(drawn) == 60 and set(drawn) == {0, 1, 2}                                    # indices repeat
    assert list(RandomSampler(range(3), replacement=True, num_samples=60, generator=seed(1))) == drawn
    assert len(RandomSampler(range(3), replacement=True)) == 3
    sampler = RandomSampler(range(20), generator=seed(5))
    assert list(sampler) != list(sampler)                                                  # a new order each pass
    endless = RandomSampler(Squares(5), replacement=True, num_samples=int(1e10))          # makemore's training loader
    loader = DataLoader(Squares(5), batch_size=32, pin_memory=True, num_workers=0, sampler=endless)
    x, y = next(iter(loader))                                                              # drawn as needed
    assert x.shape == (32, 2) and len(loader) == int(1e10) // 32                          # 32 divides 1e10


def test_subset_and_weighted_random_samplers():
    seed = torch.Generator().manual_seed
    picked = list(SubsetRandomSampler([7, 3, 9, 1], generator=seed(0)))
    assert sorted(picked) == [1, 3, 7, 9] and len(SubsetRandomSampler([7, 3])) == 2
    counts = Counter(WeightedRandomSampler([0.0, 1.0, 3.0], 4000, generator=seed(2)))
    assert counts[0] == 0 and 0.70 < counts[2] / 4000 < 0.80                               # 3/4 of the draws
    distinct = list(WeightedRandomSampler([1.0, 0.0, 2.0, 5.0], 3, replacement=False, generator=seed(2)))
    assert sorted(distinct) == [0, 2, 3]                                                   # each at most once
    assert list(WeightedRandomSampler([1.0, 2.0, 3.0], 5, generator=seed(9))) == \
        list(WeightedRandomSampler([1.0, 2.0, 3.0], 5, generator=seed(9)))


def test_data_loader_reads_the_order_of_a_sampler_or_the_batches_of_a_batch_sampler():
    def values(loader):
        return [host(batch).tolist() for (batch,) in loader]
    ds = TensorDataset(torch.arange(10) * 10)
    assert values(DataLoader(ds, batch_size=2, sampler=[9, 0, 4])) == [[90, 0], [40]]
    loader = DataLoader(ds, batch_sampler=[[1, 2, 3], [5]])
    assert values(loader) == [[10, 20, 30], [50]] and len(loader) == 2 and loader.batch_size is None
    weighted = DataLoader(ds, batch_size=5, sampler=WeightedRandomSampler([0.0] * 9 + [1.0], 10))
    assert values(weighted) == [[90] * 5] * 2 and len(weighted) == 2
    shuffled = DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))
    assert isinstance(shuffled.sampler, RandomSampler) and isinstance(shuffled.batch_sampler, BatchSampler)
    assert sorted(sum(values(shuffled), [])) == list(range(0, 100, 10))
    one_by_one = DataLoader(ds, batch_size=None, sampler=[3, 1])
    assert [host(t).item() for (t,) in one_by_one] == [30, 10]


def test_a_sampler_without_len_iterates_and_the_loaders_len_says_why_it_has_none():
    class Evens(Sampler):
        def __init__(self, n):
            super().__init__(range(n))                       # as samplers written for older PyTorch do
            self.n = n

        def __iter__(self):
            return iter(range(0, self.n, 2))
    loader = DataLoader(list(range(10)), batch_size=2, sampler=Evens(10))
    assert [host(b).tolist() for b in loader] == [[0, 2], [4, 6], [8]]
    with pytest.raises(TypeError, match="Evens defines no __len__"):
        len(loader)
    with pytest.raises(NotImplementedError, match="must define __iter__"):
        iter(Sampler())


def test_default_collate_reads_numbers_as_pytorch():
    mixed = default_collate([1, 2.5])
    assert host(mixed).tolist() == [1.0, 2.5] and mixed.dtype == np.float32            # torch.tensor([1, 2.5])
    assert default_collate([2.5, 1]).dtype == np.float64                                  # a float first: float64
    assert default_collate([True, 2]).dtype == np.int64 and default_collate([True, False]).dtype == bool
    assert default_collate([b"ab", b"c"]) == [b"ab", b"c"]


def test_random_split_refuses_fractions_outside_zero_to_one_and_warns_of_an_empty_split():
    with pytest.raises(ValueError, match=r"Fraction at index 0 is not between 0 and 1"):
        random_split(range(10), [1.5, -0.5])
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        parts = random_split(range(3), [0.5, 0.0, 0.5])
    assert [len(p) for p in parts] == [2, 0, 1]                       # floors 1, 0, 1; the one left to the first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        random_split(range(10), [0.5, 0.5])


def test_distributed_sampler_is_a_sampler_a_loader_reads_without_mpi():
    """Given num_replicas and rank, DistributedSampler needs no world: a DataLoader reads rank 1's share of 7 items
    over 3 ranks, padded from the start as PyTorch pads (indices 1 and 4, then 7 wraps to 0)."""
    from tinyattn.utils.data.distributed import DistributedSampler as from_its_module
    assert from_its_module is DistributedSampler and issubclass(DistributedSampler, Sampler)
    data = TensorDataset(torch.arange(7))
    sampler = DistributedSampler(data, num_replicas=3, rank=1, shuffle=False)
    batches = [host(x).tolist() for (x,) in DataLoader(data, batch_size=2, sampler=sampler)]
    assert len(sampler) == 3 and batches == [[1, 4], [0]]


def test_default_collate_refuses_numpy_strings_as_pytorch_does():
    with pytest.raises(TypeError, match="found <U1"):
        default_collate([np.array(["a"]), np.array(["b"])])


def test_batch_size_none_gives_each_samples_arrays_as_tensors_as_pytorchs_default_convert():
    data = [({"x": np.arange(3, dtype=np.float32), "name": "a"}, np.int64(4)), ({"x": np.ones(3, np.float32),
                                                                                  "name": "b"}, np.int64(5))]
    first = next(iter(DataLoader(data, batch_size=None)))
    assert isinstance(first, tuple) and isinstance(first[0]["x"], torch.Tensor) and first[0]["name"] == "a"
    assert first[0]["x"].dtype == torch.float32 and host(first[0]["x"]).tolist() == [0.0, 1.0, 2.0]
    assert isinstance(first[1], torch.Tensor) and first[1].item() == 4
    strings = np.array(["s"])
    assert torch.utils.data.default_convert([strings])[0] is strings
