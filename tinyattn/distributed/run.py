"""`python -m tinyattn.distributed.run --nproc-per-node N script.py args...`, as torch.distributed.run (torchrun):
starts N ranks on this machine with MPI's mpiexec, each through the bootstrap (tinyattn/distributed/bootstrap.py).

Across machines, start the bootstrap with MPI's own tools instead (docs/distributed.md):
`mpiexec -f hosts -n 8 python -m tinyattn.distributed.bootstrap script.py`, or under Slurm
`srun python -m tinyattn.distributed.bootstrap script.py`.
"""
import argparse
import os
import shutil
import sys


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tinyattn.distributed.run",
                                     description="Run a training script on N ranks of this machine, on MPI.")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1,
                        help="how many ranks (processes) to start")
    parser.add_argument("--standalone", action="store_true", help="accepted as torchrun's; one machine is the only "
                        "case here")
    parser.add_argument("--mpiexec-args", default="", help="extra arguments for mpiexec, e.g. '-bind-to core'")
    parser.add_argument("-m", "--module", action="store_true", help="the target is a module (python -m) name")
    parser.add_argument("script", help="the script (or, with -m, the module) each rank runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args(argv)
    if args.nproc_per_node < 1:
        parser.error(f"--nproc-per-node must be at least 1, got {args.nproc_per_node}")
    return args


def mpiexec():
    """MPICH's mpiexec beside this Python (the mpich wheel puts it in the environment's bin), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")
    if found is None:
        raise SystemExit('tinyattn.distributed.run needs mpiexec: pip install -e ".[distributed]" (mpich gives it)')
    return found


def command(args):
    target = ["-m", args.script] if args.module else [args.script]
    return ([mpiexec(), "-n", str(args.nproc_per_node), *args.mpiexec_args.split(), sys.executable, "-m",
             "tinyattn.distributed.bootstrap", *target, *args.args])


def main(argv=None):
    line = command(parse(sys.argv[1:] if argv is None else argv))
    os.execv(line[0], line)


if __name__ == "__main__":
    main()
