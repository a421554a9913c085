"""ZeroRedundancyOptimizer (ZeRO stage 1), as torch.distributed.optim's: each rank keeps the optimizer state of its
shard of the parameters only, steps that shard, and broadcasts the updated values to the other ranks.

The gradients are already averaged (DistributedDataParallel), so every rank could step every parameter; ZeRO-1
saves the memory of the state instead (Adam's two buffers are twice the parameters): each rank holds about 1/world of
it. The update of each parameter is the plain optimizer's own, so the parameters are exactly those of the plain
optimizer on one process. Parameters are dealt out whole, the largest first, each to the rank that holds least so far.
"""
import numpy

from ... import backend
from ...optim.optimizer import Optimizer
from ...tensor import Tensor
from .. import collectives as dist
from ..process_group import group_or_default


class ZeroRedundancyOptimizer(Optimizer):
    """params and **defaults as optimizer_class takes them; param_groups holds every parameter (so learning-rate
    schedules and zero_grad see them all), self.optim the plain optimizer over this rank's shard."""

    def __init__(self, params, optimizer_class, process_group=None, **defaults):
        super().__init__(params, defaults)
        self.process_group = process_group
        group = group_or_default(process_group)
        self.world, self.rank = group.size(), group.rank()
        self._owner = self._deal_out()
        mine = [{**g, "params": [p for p in g["params"] if self._owner[id(p)] == self.rank]}
                for g in self.param_groups]
        self.optim = optimizer_class(mine, **defaults)
        self.defaults = self.optim.defaults
        for g, local in zip(self.param_groups, self.optim.param_groups):   # the class's defaults (Adam's betas, ...)
            g.update({k: v for k, v in local.items() if k not in g})
        self._consolidated = None

    def _deal_out(self):
        """Global rank of the owner of each parameter (by id): in each group the largest first, to the rank whose
        shard is smallest so far (as PyTorch's)."""
        owner, sizes = {}, [0] * self.world
        for g in self.param_groups:
            for p in sorted(g["params"], key=lambda p: -p.array.size):
                rank = sizes.index(min(sizes))
                owner[id(p)], sizes[rank] = rank, sizes[rank] + p.array.size
        return owner

    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def step(self, closure=None):
        """Step this rank's shard with the hyper-parameters of param_groups now, then bring every rank's update."""
        if closure is not None:
            raise NotImplementedError("ZeroRedundancyOptimizer.step(closure) is not supported here")
        for mine, g in zip(self.optim.param_groups, self.param_groups):
            mine.update({k: v for k, v in g.items() if k != "params"})
        self.optim.step()
        self._consolidated = None
        self._broadcast_shards()

    def _broadcast_shards(self):
        """Each rank's updated parameters, packed per dtype in one flat array, broadcast from that rank."""
        ranks = group_or_default(self.process_group).ranks
        sent = []
        for rank in range(self.world):
            owned = [p for p in self._params() if self._owner[id(p)] == rank]
            for dtype in dict.fromkeys(p.dtype for p in owned):
                same = [p for p in owned if p.dtype == dtype]
                flat = numpy.concatenate([backend.to_host(p.array).reshape(-1) for p in same]) if rank == self.rank \
                    else numpy.empty(sum(p.array.size for p in same), dtype=dtype)
                sent.append((rank, same, flat, dist.broadcast(Tensor(flat), src=ranks[rank],
                                                               group=self.process_group, async_op=True)))
        for rank, same, flat, work in sent:
            work.wait()
            if rank == self.rank:
                continue
            offset = 0
            for p in same:
                p.array[...] = backend.xp_of(p.array).asarray(flat[offset:offset + p.array.size].reshape(p.shape))
                p._mark_modified()
                offset += p.array.size

    def local_state_bytes(self):
        """Bytes of optimizer state this rank holds (its shard's buffers): about 1/world of the plain optimizer's."""
        return sum(value.nbytes for buffers in self.optim.state.values() for value in buffers.values()
                   if backend.is_array(value))

    # -- saving and resuming ----------------------------------------------------------------------------------------
    def consolidate_state_dict(self, to=0):
        """Gather every rank's shard of the state onto rank `to` (every rank calls it); that rank's state_dict() then
        returns the whole state, in the plain optimizer's layout (parameters numbered over all groups)."""
        group = group_or_default(self.process_group)
        index = {id(p): i for i, p in enumerate(self._params())}
        shard = {index[id(p)]: buffers for p, buffers in self.optim.state.items()}
        # what each rank holds: (parameter index, name, number or (shape, dtype)); the arrays follow by send/recv
        listing = [(i, name, (value.shape, value.dtype.str) if backend.is_array(value) else value)
                   for i, buffers in sorted(shard.items()) for name, value in buffers.items()]
        listings = group.comm.gather(listing, root=group.group_rank(to, "to"))
        if self.rank != group.group_rank(to, "to"):
            for i, name, _ in listing:
                if backend.is_array(shard[i][name]):
                    dist.send(Tensor(numpy.ascontiguousarray(backend.to_host(shard[i][name]))), dst=to,
                              group=self.process_group)
            return
        state = {}
        for rank, listing in enumerate(listings):
            for i, name, what in listing:
                if rank == self.rank or not isinstance(what, tuple):
                    value = shard[i][name] if rank == self.rank else what
                else:
                    value = numpy.empty(what[0], dtype=numpy.dtype(what[1]))
                    dist.recv(Tensor(value), src=group.ranks[rank], group=self.process_group)
                state.setdefault(i, {})[name] = Tensor(backend.to_host(value).copy()) if backend.is_array(value) \
                    else value
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        self._consolidated = {"state": state, "param_groups": groups}

    def state_dict(self):
        """The whole state, on the rank consolidate_state_dict(to=...) gathered it on, since the last step."""
        if self._consolidated is None:
            raise RuntimeError("ZeroRedundancyOptimizer.state_dict(): the state is spread over the ranks; call "
                               "consolidate_state_dict(to=rank) on every rank first, then state_dict() on that rank")
        return self._consolidated

    def load_state_dict(self, state_dict):
        """Take a whole state (saved from this optimizer, or from the plain optimizer); each rank keeps its shard."""
        index = {id(p): i for i, p in enumerate(self._params())}
        mine = [index[id(p)] for g in self.optim.param_groups for p in g["params"]]
        local = {"state": {n: state_dict["state"][i] for n, i in enumerate(mine) if i in state_dict["state"]},
                 "param_groups": [{**saved, "params": [mine.index(index[id(p)]) for p in g["params"]]}
                                  for saved, g in zip(state_dict["param_groups"], self.optim.param_groups)]}
        self.optim.load_state_dict(local)
        for saved, g in zip(state_dict["param_groups"], self.param_groups):
            g.update({k: v for k, v in saved.items() if k != "params"})
