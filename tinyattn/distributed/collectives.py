"""Collectives and point-to-point messages on tinyattn tensors, with torch.distributed's names and arguments.

Each acts in place on the tensor's array through MPI's buffer interface (no pickling of arrays): a contiguous CPU
array is handed to MPI as it is; a strided view, or an array on the GPU, is staged through a contiguous copy in host
memory and written back (GPU arrays always go through the host for now: no CUDA-aware MPI, no NCCL). Every call
starts MPI's non-blocking form; async_op=True returns the Work, else it is waited for before returning.
"""
import enum
import time
import zlib

import numpy

from .. import backend
from ..tensor import Tensor
from .process_group import _mpi, debug_checks, group_or_default


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


def _mpi_op(op, dtype):
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a tinyattn.distributed.ReduceOp, got {op!r}")
    if op is ReduceOp.AVG and dtype.kind not in "fc":
        raise TypeError(f"ReduceOp.AVG needs a floating-point tensor, got dtype {dtype}")
    MPI = _mpi()
    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD, ReduceOp.MIN: MPI.MIN,
            ReduceOp.MAX: MPI.MAX}[op]


class Work:
    """A started operation, as PyTorch's Work: wait() blocks until it is done (and its result is in the tensors);
    is_completed() asks without blocking."""

    def __init__(self, request, finish=None, buffers=(), status=None):
        self.request, self._finish, self.status = request, finish, status
        self._buffers = buffers     # host arrays MPI reads or writes until the operation is done

    def _done(self):
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()

    def wait(self, timeout=None):
        """timeout: seconds or a datetime.timedelta, as PyTorch's; past it, RuntimeError."""
        if timeout is None:
            self.request.Wait(self.status)
        else:
            seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
            deadline = time.monotonic() + seconds
            while not self.request.Test(self.status):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Work.wait: the operation is not done after {seconds} s")
        self._done()
        return True

    def is_completed(self):
        if self.request.Test(self.status):
            self._done()
            return True
        return False


def _finished(work, async_op):
    """The Work for async_op=True; else None, once it is done."""
    return work if async_op else work.wait() and None


class _Buffer:
    """The host memory MPI reads and writes for a tensor: its own array when that is a contiguous CPU array, else a
    contiguous host copy that write_back() puts into the tensor."""

    def __init__(self, tensor):
        self.tensor = tensor
        array = tensor.array
        self.staged = backend.is_cupy_array(array) or not array.flags.c_contiguous
        self.array = numpy.ascontiguousarray(backend.to_host(array)) if self.staged else array

    def write_back(self, values=None):
        """After MPI wrote into the buffer (or into values, a host array of the tensor's shape)."""
        values = self.array if values is None else values
        if self.staged or values is not self.array:
            self.tensor.array[...] = backend.xp_of(self.tensor.array).asarray(values)
        self.tensor._mark_modified()


def _check_same(group, what, **facts):
    """Every rank of group must pass the same sizes, dtypes, op and root to a collective: a difference would give a
    wrong result or a hang, so one small all-reduce of a fingerprint compares them on every call (with
    TINYATTN_DISTRIBUTED_DEBUG=1, as TORCH_DISTRIBUTED_DEBUG, whole shapes too). A difference raises on every rank,
    naming each rank's. facts: tensors (by role) and plain values."""
    if group.size() == 1:
        return
    exact = debug_checks()
    said = {k: _facts(v, exact) if isinstance(v, Tensor) else v for k, v in facts.items()}
    fingerprint = zlib.crc32(repr(said).encode())
    both = numpy.array([fingerprint, -fingerprint], dtype=numpy.int64)
    group.comm.Allreduce(_mpi().IN_PLACE, both, op=_mpi().MAX)
    if both[0] != -both[1]:                  # the largest and the smallest fingerprint differ
        every = group.comm.allgather(said)
        ranks = "; ".join(f"rank {group.ranks[i]}: " + ", ".join(f"{k} {v}" for k, v in s.items())
                          for i, s in enumerate(every))
        raise RuntimeError(f"{what}: the ranks disagree ({ranks})")


def _facts(tensor, exact=True):
    return (f"of shape {tuple(tensor.shape)}" if exact else f"of {tensor.array.size} elements") + \
        f" and dtype {tensor.dtype}"


def barrier(group=None, async_op=False):
    return _finished(Work(group_or_default(group).comm.Ibarrier()), async_op)


def broadcast(tensor, src, group=None, async_op=False):
    """tensor on every rank becomes src's (src a global rank)."""
    group = group_or_default(group)
    _check_same(group, "broadcast", src=src, tensor=tensor)
    buffer = _Buffer(tensor)
    request = group.comm.Ibcast(buffer.array, root=group.group_rank(src, "src"))
    return _finished(Work(request, buffer.write_back), async_op)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """tensor on every rank becomes the reduction (op) of every rank's."""
    group = group_or_default(group)
    _check_same(group, "all_reduce", op=op, tensor=tensor)
    return _finished(start_all_reduce_unchecked(tensor, op, group), async_op)


def start_all_reduce_unchecked(tensor, op, group):
    """all_reduce's Work, started without first comparing the ranks' tensors: for a caller that compared them once
    for all its calls (DistributedDataParallel, its buckets when wrapping), as the check would cost a round trip of
    its own each time."""
    buffer = _Buffer(tensor)
    request = group.comm.Iallreduce(_mpi().IN_PLACE, buffer.array, op=_mpi_op(op, tensor.dtype))
    return Work(request, _averaged(buffer, op, group))


def _averaged(buffer, op, group):
    """write_back, after dividing the sum by the group's size for AVG (MPI has no average)."""
    if op is not ReduceOp.AVG:
        return buffer.write_back

    def finish():
        buffer.array /= buffer.array.dtype.type(group.size())
        buffer.write_back()
    return finish


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[i] becomes rank i's tensor."""
    group = group_or_default(group)
    if len(tensor_list) != group.size():
        raise ValueError(f"all_gather needs a list of {group.size()} tensors (one per rank), got {len(tensor_list)}")
    wrong = [(i, t.shape, t.dtype) for i, t in enumerate(tensor_list) if t.shape != tensor.shape
             or t.dtype != tensor.dtype]
    if wrong:
        raise ValueError(f"all_gather: tensor_list entries {wrong} differ from the input's shape {tensor.shape} and "
                         f"dtype {tensor.dtype}")
    _check_same(group, "all_gather", tensor=tensor)
    gathered = numpy.empty((group.size(),) + tensor.shape, dtype=tensor.dtype)
    source = _Buffer(tensor).array
    request = group.comm.Iallgather(source, gathered)

    def finish():
        for out, values in zip(tensor_list, gathered):
            _Buffer(out).write_back(values)
    return _finished(Work(request, finish, (source, gathered)), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output_tensor holds every rank's input_tensor, in rank order: (world * n, ...) or (world, n, ...)."""
    group = group_or_default(group)
    _check_sizes("all_gather_into_tensor", output_tensor, input_tensor, group.size())
    _check_same(group, "all_gather_into_tensor", input=input_tensor, output=output_tensor)
    buffer, source = _Buffer(output_tensor), _Buffer(input_tensor).array
    request = group.comm.Iallgather(source, buffer.array)
    return _finished(Work(request, buffer.write_back, (source,)), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """output on rank i becomes the reduction over ranks of the i-th of the world's equal pieces of input."""
    group = group_or_default(group)
    _check_sizes("reduce_scatter_tensor", input, output, group.size())
    _check_same(group, "reduce_scatter_tensor", op=op, input=input, output=output)
    buffer, source = _Buffer(output), _Buffer(input).array
    request = group.comm.Ireduce_scatter_block(source, buffer.array, op=_mpi_op(op, input.dtype))
    return _finished(Work(request, _averaged(buffer, op, group), (source,)), async_op)


def _check_sizes(what, whole, piece, world):
    if whole.dtype != piece.dtype or whole.array.size != world * piece.array.size:
        raise ValueError(f"{what}: the whole tensor must hold world size ({world}) times the piece, of one dtype; "
                         f"got {whole.shape} {whole.dtype} and {piece.shape} {piece.dtype}")


def isend(tensor, dst, group=None, tag=0):
    """Start sending tensor to rank dst (global); the Work's wait() returns when tensor may be changed again."""
    group = group_or_default(group)
    peer = group.group_rank(dst, "dst")
    ahead = group.comm.isend(_facts(tensor), dest=peer, tag=tag) if debug_checks() else None  # its description
    source = _Buffer(tensor).array
    return Work(group.comm.Isend(source, dest=peer, tag=tag), ahead and ahead.wait, buffers=(source,))


def irecv(tensor, src=None, group=None, tag=0):
    """Start receiving into tensor from rank src (global; None: any rank). With TINYATTN_DISTRIBUTED_DEBUG=1 the
    sender's description of its tensor comes first; from any rank (src=None), irecv waits for it, to know whose
    array follows."""
    group = group_or_default(group)
    MPI = _mpi()
    peer = MPI.ANY_SOURCE if src is None else group.group_rank(src, "src")
    description = None
    if debug_checks():
        if src is None:
            first = MPI.Status()
            said = group.comm.recv(source=peer, tag=tag, status=first)
            peer, description = first.Get_source(), lambda: said
        else:
            description = group.comm.irecv(source=peer, tag=tag).wait
    buffer, status = _Buffer(tensor), MPI.Status()

    def finish():
        """A shorter message than the tensor would leave part of it as it was: refused (a longer one is MPI's
        truncation error)."""
        sender = f"from rank {group.ranks[status.Get_source()]}"
        sent = description and description()
        if sent and sent != _facts(tensor):
            raise RuntimeError(f"recv: rank {group.ranks[group.rank()]} receives into a tensor {_facts(tensor)}, "
                               f"{sender} one {sent}")
        if status.Get_count(MPI.BYTE) != buffer.array.nbytes:
            raise RuntimeError(f"recv: rank {group.ranks[group.rank()]} received {status.Get_count(MPI.BYTE)} bytes "
                               f"{sender} into a tensor {_facts(tensor)} ({buffer.array.nbytes} bytes)")
        buffer.write_back()
    return Work(group.comm.Irecv(buffer.array, source=peer, tag=tag), finish, status=status)


def send(tensor, dst, group=None, tag=0):
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src=None, group=None, tag=0):
    """Receive into tensor; returns the sender's global rank."""
    work = irecv(tensor, src, group, tag)
    work.wait()
    return group_or_default(group).ranks[work.status.Get_source()]
