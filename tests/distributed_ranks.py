"""What each rank runs for tests/test_distributed.py: `mpiexec -n N python tests/distributed_ranks.py CASE...`.
Every check asserts on its rank; the last line a rank prints is `rank R ok CASE...` (the test reads it)."""
import datetime
import os
import sys

import numpy as np

import tinyattn as ta
import tinyattn.distributed as dist
from tinyattn import nn
from tinyattn.distributed.optim import ZeroRedundancyOptimizer
from tinyattn.utils.data.distributed import DistributedSampler
from tinyattn.nn.parallel import DistributedDataParallel as DDP


def raises(kind, words, call):
    try:
        call()
    except kind as error:
        missing = [w for w in words if w not in str(error)]
        assert not missing, f"{error} does not say {missing}"
        return str(error)
    raise AssertionError(f"{call} did not raise {kind.__name__}")


def collectives(rank, world):
    others = range(world)
    t = ta.tensor([rank + 1.0, 2.0 * rank - 1.0], dtype=ta.float32)
    expected = {dist.ReduceOp.SUM: sum, dist.ReduceOp.MAX: max, dist.ReduceOp.MIN: min,
                dist.ReduceOp.PRODUCT: np.prod, dist.ReduceOp.AVG: np.mean}
    for op, reduce in expected.items():
        x = t.clone()
        version = x._version
        dist.all_reduce(x, op=op)
        want = [reduce([r + 1.0 for r in others]), reduce([2.0 * r - 1.0 for r in others])]
        assert x.dtype == np.float32 and np.allclose(x.numpy(), want, rtol=1e-6), (op, x, want)
        assert x._version > version                                   # an in-place change, counted
    counts = ta.tensor([rank, 1])                                     # int64
    dist.all_reduce(counts)
    assert counts.tolist() == [sum(others), world] and counts.dtype == np.int64
    raises(TypeError, ["AVG", "int64"], lambda: dist.all_reduce(counts, op=dist.ReduceOp.AVG))
    base = ta.zeros(3, 4)                                              # a strided view reduces into its base
    column = base[:, 1]
    column.fill_(float(rank))
    work = dist.all_reduce(column, async_op=True)
    assert work.wait() is True and work.is_completed()
    assert base[:, 1].tolist() == [float(sum(others))] * 3 and base.sum().item() == 3 * sum(others)
    b = ta.full((2, 2), float(rank))
    dist.broadcast(b, src=world - 1)
    assert b.tolist() == [[world - 1.0] * 2] * 2
    gathered = [ta.zeros(2) for _ in others]
    dist.all_gather(gathered, ta.tensor([rank, -rank], dtype=ta.float32))
    assert [g.tolist() for g in gathered] == [[r, -r] for r in others]
    flat, stacked = ta.zeros(2 * world), ta.zeros(world, 2)
    dist.all_gather_into_tensor(flat, ta.tensor([rank, 10.0 * rank]))
    dist.all_gather_into_tensor(stacked, ta.tensor([rank, 10.0 * rank]))
    assert flat.tolist() == [v for r in others for v in (r, 10.0 * r)] and stacked.reshape(-1).tolist() == flat.tolist()
    pieces = ta.arange(3.0 * world) * (rank + 1)                      # rank r's piece i: [3i, 3i+1, 3i+2] * (r+1)
    mine = ta.zeros(3)
    dist.reduce_scatter_tensor(mine, pieces)
    total = sum(r + 1 for r in others)
    assert mine.tolist() == [(3 * rank + j) * total for j in range(3)]
    dist.reduce_scatter_tensor(mine, pieces, op=dist.ReduceOp.AVG)
    assert np.allclose(mine.numpy(), [(3 * rank + j) * total / world for j in range(3)])
    raises(ValueError, ["reduce_scatter_tensor", f"({3 * world},)", "(2,)"],
           lambda: dist.reduce_scatter_tensor(ta.zeros(2), pieces))
    # a ring of non-blocking messages (what ring attention needs), then blocking ones between 0 and 1
    out, into = ta.full((4,), float(rank)), ta.zeros(4)
    works = [dist.isend(out, dst=(rank + 1) % world), dist.irecv(into, src=(rank - 1) % world)]
    for w in works:
        w.wait(timeout=datetime.timedelta(seconds=60))
    never = dist.irecv(ta.zeros(1), src=(rank - 1) % world, tag=99)       # nobody sends with this tag
    raises(RuntimeError, ["not done after 0.01 s"], lambda: never.wait(timeout=0.01))
    assert not never.is_completed()
    dist.barrier()
    dist.send(ta.ones(1), dst=(rank + 1) % world, tag=99)                 # now someone does
    assert never.wait() is True
    assert into.tolist() == [float((rank - 1) % world)] * 4
    if world == 1:
        return
    if rank == 0:
        dist.send(ta.tensor([7.0, 8.0]), dst=1)
    elif rank == 1:
        got = ta.zeros(2)
        assert dist.recv(got) == 0 and got.tolist() == [7.0, 8.0]      # src=None: any sender, which is returned
    pair = dist.new_group([0, 1])
    x = ta.tensor([float(rank)])
    if rank < 2:
        dist.all_reduce(x, group=pair)
        assert x.tolist() == [1.0] and dist.get_rank(pair) == rank and dist.get_world_size(pair) == 2
    else:
        raises(RuntimeError, ["not a member"], lambda: dist.all_reduce(x, group=pair))
        assert dist.get_rank(pair) == -1
    dist.barrier()


def three_layers():
    return nn.Sequential(nn.Linear(6, 8), _Probe(), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).double()


class _Probe(nn.Module):
    """Passes its input on; once watching is [seen, a DDP], through Mark, whose backward runs just before the first
    layer's."""

    def __init__(self):
        super().__init__()
        self.watching = []

    def forward(self, x):
        return Mark.apply(x, *self.watching) if self.watching else x


class Mark(ta.Function):
    """The identity; its backward notes how many buckets DDP has started by then."""

    @staticmethod
    def forward(ctx, x, seen, ddp):
        ctx.seen, ctx.ddp = seen, ddp
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        ctx.seen.append(len(ctx.ddp._started))
        return grad, None, None


def batch(rank, world, per_rank=4, seed=5):
    ta.manual_seed(seed)
    x, y = ta.randn(per_rank * world, 6).double(), ta.randint(0, 3, (per_rank * world,))
    share = slice(rank * per_rank, (rank + 1) * per_rank)
    return x, y, x[share], y[share]


def ddp(rank, world):
    F = nn.functional
    ta.manual_seed(rank)                            # a different start on each rank: wrapping broadcasts rank 0's
    model = three_layers()
    wrapped = DDP(model, bucket_cap_mb=200 / 2**20)  # 200 bytes: several buckets
    ta.manual_seed(0)
    assert all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(model.parameters(), three_layers().parameters()))
    assert wrapped.module is model and list(wrapped.state_dict())[0] == "module.0.weight"
    assert len(wrapped._buckets) >= 3
    whole = three_layers()
    whole.load_state_dict(model.state_dict())
    x, y, mine_x, mine_y = batch(rank, world)
    F.cross_entropy(whole(x), y).backward()
    # buckets start during backward: by the time the first layer's backward runs, the last layers' are on their way
    seen = []
    model[1].watching = [seen, wrapped]
    F.cross_entropy(wrapped(mine_x), mine_y).backward()
    model[1].watching = []
    first = {id(model[0].weight), id(model[0].bias)}
    later = sum(not first & {id(p) for p in bucket.params} for bucket in wrapped._buckets)
    assert later >= 2 and seen == [later], (seen, later)   # every bucket without the first layer's, started
    for p, q in zip(model.parameters(), whole.parameters()):
        assert np.allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-15)
    # no_sync and require_backward_grad_sync: local accumulation, averaged by the next synced backward
    for p in [*model.parameters(), *whole.parameters()]:
        p.grad = None
    x2, y2, mine_x2, mine_y2 = batch(rank, world, seed=6)
    (F.cross_entropy(whole(x), y) + F.cross_entropy(whole(x2), y2)).backward()
    with wrapped.no_sync():
        F.cross_entropy(wrapped(mine_x), mine_y).backward()
    mid = model[0].weight.grad.numpy().copy()
    F.cross_entropy(wrapped(mine_x2), mine_y2).backward()
    assert not np.allclose(mid, model[0].weight.grad.numpy())
    for p, q in zip(model.parameters(), whole.parameters()):
        assert np.allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-15)
    wrapped.require_backward_grad_sync = False
    F.cross_entropy(wrapped(mine_x), mine_y).backward()
    assert not wrapped._started and wrapped.require_backward_grad_sync is False
    wrapped.require_backward_grad_sync = True
    # a parameter that gets no gradient: an error naming it, unless find_unused_parameters=True
    unused = nn.ModuleDict({"used": nn.Linear(6, 3).double(), "idle": nn.Linear(6, 3).double()})
    plain = DDP(_UsesOne(unused))
    F.cross_entropy(plain(mine_x), mine_y).backward()
    raises(RuntimeError, ["'parts.idle.weight'", "'parts.idle.bias'", "find_unused_parameters=True"],
           lambda: plain(mine_x))
    unused = nn.ModuleDict({"used": nn.Linear(6, 3).double(), "idle": nn.Linear(6, 3).double()})
    tolerant = DDP(_UsesOne(unused), find_unused_parameters=True)
    for _ in range(2):
        F.cross_entropy(tolerant(mine_x), mine_y).backward()
    assert unused["idle"].weight.grad is None and unused["used"].weight.grad is not None
    # used on rank 0 alone: every rank gets the average (rank 0's gradient, zeros elsewhere, over the world)
    unused = nn.ModuleDict({"used": nn.Linear(6, 3).double(), "idle": nn.Linear(6, 3).double()})
    sometimes = DDP(_UsesOne(unused, also=[0]), find_unused_parameters=True)
    (sometimes(mine_x) * ta.arange(3.0).double()).sum().backward()
    every = [ta.zeros(3, 6).double() for _ in range(world)]
    dist.all_gather(every, unused["idle"].weight.grad)
    assert all(np.array_equal(e.numpy(), every[0].numpy()) for e in every)
    if rank == 0:
        local = np.arange(3.0)[:, None] * mine_x.numpy().sum(0)[None, :]
        assert np.allclose(every[0].numpy(), local / world) and np.abs(local).max() > 0.1
    # ranks whose modules differ are refused when wrapping, naming the first difference
    odd = nn.Linear(6, 3 + (rank == 1))
    if world > 1:
        raises(ValueError, ["rank 1", "'weight'", "(4, 6)", "(3, 6)"], lambda: DDP(odd))


class _UsesOne(nn.Module):
    """parts["used"], plus parts["idle"] on the ranks in also."""

    def __init__(self, parts, also=()):
        super().__init__()
        self.parts, self.also = parts, also

    def forward(self, x):
        out = self.parts["used"](x)
        return out + self.parts["idle"](x) if dist.get_rank() in self.also else out


def zero(rank, world):
    """ZeRO-1 steps exactly as the plain optimizer, keeps ~1/world of its state, and gathers it whole."""
    ta.manual_seed(0)
    model, plain_model = three_layers(), three_layers()
    plain_model.load_state_dict(model.state_dict())
    groups = lambda m: [{"params": [p for p in m.parameters() if p.ndim == 2], "weight_decay": 0.1},
                        {"params": [p for p in m.parameters() if p.ndim == 1], "weight_decay": 0.0}]
    sharded = ZeroRedundancyOptimizer(groups(model), optimizer_class=ta.optim.AdamW, lr=1e-2)
    plain = ta.optim.AdamW(groups(plain_model), lr=1e-2)
    for step in range(3):
        x, y, _, _ = batch(rank, world, seed=10 + step)
        for m, opt in ((model, sharded), (plain_model, plain)):
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()       # the same gradients on every rank
            for g in opt.param_groups:
                g["lr"] = 1e-2 / (step + 1)                      # a schedule changes the whole optimizer's groups
            opt.step()
        for p, q in zip(model.parameters(), plain_model.parameters()):
            assert np.array_equal(p.numpy(), q.numpy()), step
    whole_bytes = sum(v.nbytes for s in plain.state.values() for v in s.values() if hasattr(v, "nbytes"))
    mine = sharded.local_state_bytes()
    every = [ta.tensor([float(mine)], dtype=ta.float64) for _ in range(world)]
    dist.all_gather(every, ta.tensor([float(mine)], dtype=ta.float64))
    assert sum(e.item() for e in every) == whole_bytes and (world == 1 or mine < whole_bytes)
    raises(RuntimeError, ["consolidate_state_dict"], sharded.state_dict)
    sharded.consolidate_state_dict(to=world - 1)
    if rank == world - 1:
        gathered, reference = sharded.state_dict(), plain.state_dict()
        assert gathered["param_groups"] == reference["param_groups"], (gathered["param_groups"], reference["param_groups"])
        assert sorted(gathered["state"]) == sorted(reference["state"])
        for i, buffers in reference["state"].items():
            for name, value in buffers.items():
                assert np.array_equal(np.asarray(gathered["state"][i][name]), np.asarray(value)), (i, name)
    # a plain optimizer's state loads into the sharded one: each rank keeps its shard
    again = ZeroRedundancyOptimizer(groups(model), optimizer_class=ta.optim.AdamW, lr=1e-2)
    again.load_state_dict(plain.state_dict())
    assert again.local_state_bytes() == mine
    # with DDP, each rank on its share of the batch: as the plain optimizer in one process on the whole batch
    ta.manual_seed(rank)
    model, whole = three_layers(), three_layers()
    wrapped = DDP(model)
    whole.load_state_dict(model.state_dict())
    sharded = ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class=ta.optim.AdamW, lr=1e-2)
    plain = ta.optim.AdamW(whole.parameters(), lr=1e-2)
    for step in range(3):
        x, y, mine_x, mine_y = batch(rank, world, seed=20 + step)
        for m, opt, inputs, targets in ((wrapped, sharded, mine_x, mine_y), (whole, plain, x, y)):
            opt.zero_grad()
            nn.functional.cross_entropy(m(inputs), targets).backward()
            opt.step()
    for p, q in zip(model.parameters(), whole.parameters()):
        assert np.allclose(p.numpy(), q.numpy(), rtol=1e-10, atol=1e-13)


def sampler(rank, world):
    data = list(range(10))
    shares = [list(DistributedSampler(data, num_replicas=3, rank=r, shuffle=False)) for r in range(3)]
    assert shares == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]          # padded from the start: 0 and 1 again
    dropped = [list(DistributedSampler(data, num_replicas=3, rank=r, shuffle=False, drop_last=True))
               for r in range(3)]
    assert dropped == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    mine = DistributedSampler(data, seed=3)
    assert mine.rank == rank and mine.num_replicas == world and len(mine) == -(-10 // world)
    first = list(mine)
    mine.set_epoch(1)
    assert list(mine) != first and list(DistributedSampler(data, seed=3)) == first
    together = [ta.zeros(len(first), dtype=ta.int64) for _ in range(world)]
    dist.all_gather(together, ta.tensor(first))
    covered = [i for t in together for i in t.tolist()]
    assert sorted(set(covered)) == data and len(covered) == world * len(first)
    raises(ValueError, ["Invalid rank 3"], lambda: DistributedSampler(data, num_replicas=3, rank=3))


def mismatch(rank, world):
    """Ranks that pass different sizes, dtypes or roots are refused on every rank, naming each rank's; with
    TINYATTN_DISTRIBUTED_DEBUG=1 whole shapes are compared too, and point-to-point messages."""
    debug = os.environ.get("TINYATTN_DISTRIBUTED_DEBUG") == "1"
    said = "of shape ({},)" if debug else "of {} elements"
    raises(RuntimeError, ["all_reduce", "rank 0: op ReduceOp.SUM, tensor " + said.format(2),
                          "rank 1: op ReduceOp.SUM, tensor " + said.format(3)],
           lambda: dist.all_reduce(ta.zeros(2 + rank)))
    raises(RuntimeError, ["broadcast", "dtype float32", "dtype float64"],
           lambda: dist.broadcast(ta.zeros(2, dtype=ta.float32 if rank == 0 else ta.float64), src=0))
    raises(RuntimeError, ["all_gather", "rank 0: tensor", "rank 1: tensor"],
           lambda: dist.all_gather([ta.zeros(2 + rank)] * world, ta.zeros(2 + rank)))
    raises(RuntimeError, ["broadcast", "src 0", "src 1"], lambda: dist.broadcast(ta.zeros(2), src=rank))
    transposed = ta.zeros((2, 3) if rank == 0 else (3, 2))
    if debug:
        raises(RuntimeError, ["(2, 3)", "(3, 2)"], lambda: dist.all_reduce(transposed))
    else:
        dist.all_reduce(transposed)                           # the same memory: MPI sees no difference
    if rank == 0:
        dist.send(ta.ones(2), dst=1)
    elif rank == 1:
        raises(RuntimeError, ["recv", "rank 1", "from rank 0", "dtype float32"], lambda: dist.recv(ta.zeros(3), src=0))


def raise_on_one(rank, world):
    dist.barrier()
    if rank == 1:
        raise ValueError("this rank's own error")
    dist.all_reduce(ta.zeros(1))          # the others wait here until the world is ended


CASES = {f.__name__: f for f in (collectives, ddp, zero, sampler, mismatch, raise_on_one)}

if __name__ == "__main__":
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if "RANK" in os.environ:                      # started by the launcher: its variables match MPI's world
        assert (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) == (rank, world)
        assert int(os.environ["LOCAL_RANK"]) == rank and int(os.environ["LOCAL_WORLD_SIZE"]) == world
        assert ta.get_num_threads() == 1
    for case in sys.argv[1:]:
        CASES[case](rank, world)
    dist.destroy_process_group()
    os.write(1, f"rank {rank} ok {' '.join(sys.argv[1:])}\n".encode())     # one write: lines of ranks never mix
