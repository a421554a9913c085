"""What each rank runs first: `python -m tinyattn.distributed.bootstrap script.py args...` (or `-m module args...`).

mpiexec, srun or a host file starts the ranks; this reads the world from MPI (not from any launcher's variables:
MPICH's hydra exports PMI_RANK, Open MPI OMPI_COMM_WORLD_RANK, Slurm SLURM_PROCID, and MPI knows them all), sets
torch.distributed's variables RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE (the ranks on this machine, from the
processes that share its memory), holds BLAS and tinyattn to one thread unless told otherwise (N ranks on N cores),
and runs the script. An exception in any rank ends them all (abort_world_on_error).
"""
import os
import runpy
import sys

from .process_group import _mpi, abort_world_on_error

USAGE = "usage: python -m tinyattn.distributed.bootstrap (script.py | -m module) [args...]"


def set_world_variables():
    MPI = _mpi()
    world = MPI.COMM_WORLD
    machine = world.Split_type(MPI.COMM_TYPE_SHARED)
    os.environ.update(RANK=str(world.Get_rank()), WORLD_SIZE=str(world.Get_size()),
                      LOCAL_RANK=str(machine.Get_rank()), LOCAL_WORLD_SIZE=str(machine.Get_size()))
    machine.Free()


def one_thread_unless_told():
    """One BLAS thread and one tinyattn thread per rank, unless OMP_NUM_THREADS or TINYATTN_NUM_THREADS say more."""
    os.environ.setdefault("TINYATTN_NUM_THREADS", "1")
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"      # for processes the script starts
        from threadpoolctl import threadpool_limits
        threadpool_limits(1, user_api="blas")


def main(argv):
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        raise SystemExit(USAGE)
    set_world_variables()
    abort_world_on_error()
    one_thread_unless_told()
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))   # as `python script.py` does
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
