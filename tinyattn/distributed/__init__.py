"""torch.distributed's names on MPI: a world of processes started by mpiexec (or srun, or
`python -m tinyattn.distributed.run`), its groups, and collectives on tinyattn tensors.

mpi4py is imported by init_process_group (or is_available), never by importing this package or tinyattn.
"""
from .collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor, all_reduce, barrier, broadcast, irecv,
                          isend, recv, reduce_scatter_tensor, send)
from .process_group import (ProcessGroup, destroy_process_group, get_backend, get_rank, get_world_size,
                            init_process_group, is_available, is_initialized, new_group)
from .ring_attention import ring_attention, shard_sequence     # the function shadows its module's name here
