"""The world of processes and its groups, on MPI (mpi4py), with torch.distributed's names.

MPI starts the processes (mpiexec, srun) and knows the world: this file only asks it. mpi4py is imported when a
group is first made, never by `import tinyattn`. One process started without mpiexec is a world of 1.
"""
import os
import sys

_world = None       # the default group, once init_process_group has run
_MPI = None


def is_available():
    """True when mpi4py imports (the `distributed` extra is installed)."""
    try:
        _mpi()
    except RuntimeError:
        return False
    return True


def _mpi():
    global _MPI
    if _MPI is None:
        try:
            from mpi4py import MPI
        except ImportError as error:
            raise RuntimeError('tinyattn.distributed runs on MPI through mpi4py: pip install -e ".[distributed]"'
                               ) from error
        _MPI = MPI
    return _MPI


class ProcessGroup:
    """Some of the world's processes and the MPI communicator they talk on (None on a rank outside the group).
    ranks are the members' global ranks, in group-rank order."""

    def __init__(self, comm, ranks):
        self.comm, self.ranks = comm, list(ranks)

    def rank(self):
        return self.comm.Get_rank() if self.comm is not None else -1

    def size(self):
        return len(self.ranks)

    def group_rank(self, global_rank, role):
        """The group rank of a global rank (PyTorch's src and dst are global ranks), checked."""
        if global_rank not in self.ranks:
            raise ValueError(f"{role} rank {global_rank} is not in this group (global ranks {self.ranks})")
        return self.ranks.index(global_rank)

    def __repr__(self):
        return f"ProcessGroup(ranks={self.ranks})"


def init_process_group(backend=None, init_method=None, world_size=-1, rank=-1, **unused):
    """Make the default group from MPI's world. backend "mpi" (or None); "gloo", PyTorch's CPU backend, runs on MPI
    here too; "nccl" is refused, saying why. world_size and rank, where given, must be what MPI says; init_method,
    timeout and PyTorch's other rendezvous arguments are accepted and unused (MPI knows the world)."""
    global _world
    if _world is not None:
        raise RuntimeError("trying to initialize the default process group twice: call destroy_process_group() "
                           "first")
    _check_backend(backend)
    MPI = _mpi()
    comm = MPI.COMM_WORLD
    for name, given, actual in (("world_size", world_size, comm.Get_size()), ("rank", rank, comm.Get_rank())):
        if given not in (-1, None) and int(given) != actual:
            raise ValueError(f"init_process_group({name}={given}), but MPI started this process with {name} "
                             f"{actual}: the world comes from mpiexec (or srun)")
    _world = ProcessGroup(comm, range(comm.Get_size()))
    if comm.Get_size() > 1:
        abort_world_on_error()


def _check_backend(backend):
    name = str(backend or "mpi").lower()
    if name == "nccl":
        from .. import backend as devices
        if not devices.cuda_is_available():
            raise RuntimeError('backend "nccl" needs NVIDIA GPUs and NCCL; on the CPU use "gloo" or "mpi" (both run '
                               "on MPI in tinyattn)")
        raise RuntimeError('backend "nccl" is not built in tinyattn: GPU tensors go through host memory on MPI; '
                           'use backend="mpi"')
    if name not in ("mpi", "gloo"):
        raise ValueError(f'unknown backend {backend!r}: tinyattn.distributed runs on MPI ("mpi"; "gloo", '
                         "PyTorch's CPU backend, is accepted and runs on MPI too)")


def abort_world_on_error():
    """An exception that reaches the top of this rank prints once, naming the rank, and ends every rank (MPI's
    Abort, as mpi4py.run does): no rank is left waiting in a collective for one that is gone."""
    MPI = _mpi()
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    previous = sys.excepthook
    if getattr(previous, "ends_the_world", False):       # in place already (the bootstrap, then the script's init)
        return

    def abort(kind, value, traceback):
        sys.stderr.write(f"tinyattn.distributed: rank {rank} of {size} raised {kind.__name__}; ending all ranks\n")
        previous(kind, value, traceback)
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)

    abort.ends_the_world = True
    sys.excepthook = abort


def is_initialized():
    return _world is not None


def default_group():
    if _world is None:
        raise RuntimeError("Default process group has not been initialized, please make sure to call "
                           "init_process_group.")
    return _world


def group_or_default(group):
    group = default_group() if group is None else group
    if group.comm is None:
        raise RuntimeError(f"rank {_world.rank()} is not a member of {group} and cannot take part in its collective")
    return group


def get_rank(group=None):
    """This process's rank: in the world, or in group (-1 where it is not a member)."""
    return (default_group() if group is None else group).rank()


def get_world_size(group=None):
    return (default_group() if group is None else group).size()


def get_backend(group=None):
    default_group()
    return "mpi"


def new_group(ranks=None, **unused):
    """A group of some global ranks (all when None). Every rank calls it, members or not, as in PyTorch."""
    world = default_group()
    ranks = list(range(world.size())) if ranks is None else sorted(int(r) for r in ranks)
    outside = [r for r in ranks if not 0 <= r < world.size()]
    if outside or len(set(ranks)) != len(ranks):
        raise ValueError(f"new_group(ranks={ranks}): ranks must be distinct and in [0, {world.size()})")
    comm = world.comm.Create(world.comm.Get_group().Incl(ranks))
    return ProcessGroup(comm if comm != _mpi().COMM_NULL else None, ranks)


def destroy_process_group(group=None):
    """Forget the default group (or free group's communicator). MPI itself ends with the process."""
    global _world
    if group is not None and group is not _world:
        if group.comm is not None:
            group.comm.Free()
            group.comm = None
        return
    default_group()
    _world = None


def debug_checks():
    """TINYATTN_DISTRIBUTED_DEBUG=1 (as TORCH_DISTRIBUTED_DEBUG): collectives compare shapes and dtypes first."""
    return os.environ.get("TINYATTN_DISTRIBUTED_DEBUG", "0") not in ("", "0", "OFF", "off")
