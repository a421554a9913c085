"""DistributedDataParallel: one model per rank, each on its share of the batch, gradients averaged in backward.

Wrapping broadcasts rank 0's parameters and buffers, so every rank starts from the same model. The parameters are
laid out, in reverse order (roughly the order backward finishes them), in buckets of about bucket_cap_mb: one flat
host array per bucket. When a parameter's gradient is final (its post-accumulate-grad hook, mid-walk), it is copied
into its bucket; a full bucket's all-reduce starts at once without blocking, while the walk computes the gradients
of earlier layers. Buckets start in one order on every rank (a collective must), and the last gradient's hook waits
for them all and writes the averages back into .grad, so they are in place when backward returns.

MPICH moves a non-blocking all-reduce along only inside MPI calls, so each hook also asks the oldest unfinished one
whether it is done (Test), which is what progresses it: the communication hides between layers' backward ops, not
inside a long one (MPICH's own progress thread, MPIR_CVAR_ASYNC_PROGRESS=1, would take a core per rank).
"""
import contextlib
import time

import numpy

from ... import backend, distributed as dist
from ...distributed.collectives import start_all_reduce_unchecked
from ...distributed.process_group import group_or_default
from ...tensor import Tensor, is_grad_enabled
from ..module import Module


FIRST_BUCKET_BYTES = 2 ** 20        # PyTorch's torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


class _Bucket:
    """Parameters of one dtype whose gradients are averaged by one all-reduce of a flat host array."""

    def __init__(self, params, dtype):
        self.params, self.offsets = params, {}
        offset = 0
        for p in params:
            self.offsets[id(p)] = (offset, offset + p.array.size)
            offset += p.array.size
        self.flat = numpy.zeros(offset, dtype=dtype)
        self.waiting = len(params)

    def put(self, p, grad):
        start, end = self.offsets[id(p)]
        self.flat[start:end] = backend.to_host(grad).reshape(-1)

    def take(self, p):
        start, end = self.offsets[id(p)]
        return self.flat[start:end].reshape(p.shape)


class DistributedDataParallel(Module):
    """torch.nn.parallel.DistributedDataParallel's arguments. device_ids and output_device are accepted (nanoGPT
    passes device_ids=[local_rank]) and change nothing: the module stays on the device it is on; so do dim (inputs
    are not split: each rank passes its own share), gradient_as_bucket_view (the buckets are host arrays of their
    own) and static_graph."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=25, find_unused_parameters=False, gradient_as_bucket_view=False,
                 static_graph=False):
        super().__init__()
        if bucket_cap_mb is None or bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        self.process_group = process_group
        self.device_ids = device_ids
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self._group = group_or_default(process_group)
        self._check_same_module_on_every_rank(bucket_cap_mb)
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor, src=self._group.ranks[0], group=process_group)
        self._names = {id(p): name for name, p in module.named_parameters()}
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._buckets, self._bucket_of = self._fill_buckets(bucket_cap_mb * 1024 * 1024)
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in self._params]
        self._syncing = False           # this backward averages (require_backward_grad_sync at forward time)
        self.last_wait_s = None         # how long the last averaging backward waited for its buckets at its end
        self._reset()

    def _check_same_module_on_every_rank(self, bucket_cap_mb):
        """Wrapping refuses ranks whose parameters or buffers differ in name, shape or dtype, naming the first, or
        whose buckets would differ: the buckets' all-reduces then need no check of their own."""
        mine = [("argument", "bucket_cap_mb", bucket_cap_mb, None)] + \
            [(kind, name, tuple(t.shape), str(t.dtype)) for kind, named in
             (("parameter", self.module.named_parameters()), ("buffer", self.module.named_buffers()))
             for name, t in named]
        group = self._group
        every = group.comm.allgather(mine)
        for rank, theirs in zip(group.ranks, every):
            for ours, other in zip(every[0], theirs):
                if ours != other:
                    raise ValueError(f"DistributedDataParallel: rank {rank}'s module differs from rank "
                                     f"{group.ranks[0]}'s: {_say(other)} on rank {rank}, {_say(ours)} on rank "
                                     f"{group.ranks[0]}")
            if len(theirs) != len(every[0]):
                longer, rank_of = (theirs, rank) if len(theirs) > len(every[0]) else (every[0], group.ranks[0])
                raise ValueError(f"DistributedDataParallel: rank {rank}'s module has {len(theirs)} parameters and "
                                 f"buffers, rank {group.ranks[0]}'s {len(every[0])}; the first only on rank "
                                 f"{rank_of}: {_say(longer[min(len(theirs), len(every[0]))])}")

    def _fill_buckets(self, capacity):
        """Buckets of at most capacity bytes (a larger parameter gets one of its own), one dtype each, filled in
        reverse parameter order, as PyTorch's; as there, the first of each dtype holds at most 1 MiB, so that its
        all-reduce starts early in backward."""
        buckets, bucket_of, current, first = [], {}, {}, set()
        for p in reversed(self._params):
            params, size = current.get(p.dtype, ([], 0))
            limit = capacity if p.dtype in first else min(capacity, FIRST_BUCKET_BYTES)
            if params and size + p.array.nbytes > limit:
                buckets.append(_Bucket(params, p.dtype))
                first.add(p.dtype)
                params, size = [], 0
            current[p.dtype] = (params + [p], size + p.array.nbytes)
        buckets += [_Bucket(params, dtype) for dtype, (params, _) in current.items()]
        for index, bucket in enumerate(buckets):
            for p in bucket.params:
                bucket_of[id(p)] = index
        return buckets, bucket_of

    def _reset(self):
        self._ready = set()             # ids of parameters whose gradient is in its bucket
        self._unused = set()            # ids of those that got none in this backward (find_unused_parameters)
        self._unreached = []            # the parameters forward's graph does not reach, marked when backward begins
        self._started = []              # (bucket, Work) in bucket order
        for bucket in self._buckets:
            bucket.waiting = len(bucket.params)

    # -- forward ----------------------------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        if self._syncing and self._ready:
            self._refuse_unfinished_reduction()
        self._syncing = self.require_backward_grad_sync and is_grad_enabled()
        self._reset()
        if self.broadcast_buffers and self._syncing:     # rank 0's buffers, as PyTorch's (not under no_grad)
            for buffer in self.module.buffers():
                dist.broadcast(buffer, src=self._group.ranks[0], group=self.process_group)
        output = self.module(*args, **kwargs)
        if self._syncing and self.find_unused_parameters:
            used = _parameters_reached(output)
            self._unreached = [p for p in self._params if id(p) not in used]
        return output

    def _refuse_unfinished_reduction(self):
        missing = [self._names[id(p)] for p in self._params if id(p) not in self._ready]
        raise RuntimeError(
            "DistributedDataParallel: the previous backward did not average every gradient, because these "
            f"parameters got no gradient: {missing}. Make sure every parameter is used in computing the loss, "
            "or pass find_unused_parameters=True.")

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside only accumulates .grad on each rank; the first backward outside averages the sum."""
        previous, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    # -- backward, through the parameters' hooks -------------------------------------------------------------------
    def _grad_ready(self, p):
        if self._syncing:
            # The unused are marked as backward begins, as PyTorch's are: a forward with no backward leaves none marked.
            unreached, self._unreached = self._unreached, []
            for q in unreached:
                self._mark_ready(q, None)
            self._mark_ready(p, p.grad.array)

    def _mark_ready(self, p, grad):
        """p's gradient (None: unused this step, zeros) goes into its bucket; full buckets start, in order."""
        if id(p) in self._ready:
            raise RuntimeError(f"DistributedDataParallel: parameter {self._names[id(p)]!r} got its gradient twice "
                               "in one backward (a second backward before the next forward?)")
        self._ready.add(id(p))
        bucket = self._buckets[self._bucket_of[id(p)]]
        if grad is None:
            self._unused.add(id(p))
            grad = numpy.zeros(p.shape, dtype=bucket.flat.dtype)
        bucket.put(p, grad)
        bucket.waiting -= 1
        while len(self._started) < len(self._buckets) and self._buckets[len(self._started)].waiting == 0:
            bucket = self._buckets[len(self._started)]
            self._started.append((bucket, start_all_reduce_unchecked(Tensor(bucket.flat), dist.ReduceOp.AVG,
                                                                     self._group)))
        for _, work in self._started:   # drives MPI's progress; one unfinished request is enough
            if not work.is_completed():
                break
        if len(self._ready) == len(self._params):
            self._finish()

    def _finish(self):
        """Wait for every bucket and write the averages into .grad (where a parameter was unused everywhere, its
        .grad stays as it was, as PyTorch's)."""
        used = None
        if self.find_unused_parameters:
            used = Tensor(numpy.array([id(p) not in self._unused for p in self._params], dtype=numpy.int32))
            dist.all_reduce(used, op=dist.ReduceOp.MAX, group=self.process_group)
        start = time.perf_counter()
        for bucket, work in self._started:
            work.wait()
        self.last_wait_s = time.perf_counter() - start     # the communication backward did not hide (a measure)
        for i, p in enumerate(self._params):
            if used is not None and not used.array[i]:
                continue
            averaged = self._buckets[self._bucket_of[id(p)]].take(p)
            if p.grad is None:
                p.grad = Tensor(backend.xp_of(p.array).asarray(averaged).copy())
            else:
                p.grad.array[...] = backend.xp_of(p.grad.array).asarray(averaged)
        self._reset()


def _say(entry):
    kind, name, shape, dtype = entry
    return f"{name}={shape}" if kind == "argument" else f"{kind} {name!r} of shape {shape} and dtype {dtype}"


def _parameters_reached(output):
    """ids of the leaf tensors the graph of output (a tensor, or tuple/list/dict of them) leads back to, found
    through grad_fn.next_functions as PyTorch's DDP does for find_unused_parameters."""
    found, seen = set(), set()
    stack = [t.grad_fn for t in _tensors_in(output) if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if hasattr(node, "variable"):       # an AccumulateGrad, made afresh by each next_functions
            found.add(id(node.variable))
        elif node is not None and id(node) not in seen:
            seen.add(id(node))
            stack += [next_node for next_node, _ in node.next_functions]
    return found


def _tensors_in(output):
    if isinstance(output, Tensor):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in _tensors_in(item)]
    return []
