"""tinyattn.utils.data, torch.utils.data for ported code (issue 46): Dataset, TensorDataset, Subset, random_split and
DataLoader, held to PyTorch's documented behaviour (written down here: PyTorch is never a dependency)."""
from collections import namedtuple

import numpy as np
import pytest

import tinyattn as torch
from tinyattn.utils.data import DataLoader, Dataset, Subset, TensorDataset, random_split

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


def test_worker_processes_and_samplers_are_refused_saying_why():
    with pytest.raises(ValueError, match="num_workers must be 0 here, got 2: .* in the calling process"):
        DataLoader(Squares(3), num_workers=2)
    with pytest.raises(ValueError, match="persistent_workers act on worker processes"):
        DataLoader(Squares(3), persistent_workers=True)
    assert len(DataLoader(Squares(3), num_workers=0, persistent_workers=False, prefetch_factor=None)) == 3
    with pytest.raises(ValueError, match="no sampler"):
        DataLoader(Squares(3), sampler=[0, 1])
    with pytest.raises(ValueError, match="positive integer"):
        DataLoader(Squares(3), batch_size=0)
    with pytest.raises(NotImplementedError, match="must define __getitem__"):
        Dataset()[0]


def test_it_is_also_torch_utils_data():
    assert torch.utils.data.DataLoader is DataLoader
    import tinyattn.data                                                       # the project's datasets stay apart
    assert not hasattr(tinyattn.data, "DataLoader")
