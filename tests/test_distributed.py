"""tinyattn.distributed: a world of 1 in this process, and 2 or 3 ranks started by mpiexec (or the launcher) as
subprocesses, each with a timeout so that a hang fails a test. The ranks run tests/distributed_ranks.py, which
asserts on every rank; tests/ported_ddp_train.py is nanoGPT's DDP path, compared with one process."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.distributed as dist
from tinyattn.distributed import run

pytest.importorskip("mpi4py", reason='tinyattn.distributed needs mpi4py: pip install -e ".[distributed]"')
HERE = Path(__file__).parent
RANKS = str(HERE / "distributed_ranks.py")
TIMEOUT = 120


def ranks(n, *args, launcher=False, env=None):
    """Run n ranks of `args`; the completed process (a hang past TIMEOUT raises TimeoutExpired, failing the test)."""
    start = [sys.executable, "-m", "tinyattn.distributed.run", "--nproc-per-node", str(n)] if launcher else \
        [run.mpiexec(), "-n", str(n), sys.executable]
    environment = {**os.environ, "PYTHONPATH": str(HERE.parent), **(env or {})}
    return subprocess.run(start + list(args), capture_output=True, text=True, timeout=TIMEOUT, env=environment)


def passed(result, n, cases):
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(line for line in result.stdout.splitlines() if " ok " in line) == \
        [f"rank {r} ok {cases}" for r in range(n)], result.stdout


@pytest.mark.parametrize("n, launcher", [(2, True), (3, False)])     # 3: more ranks than cores, oversubscribed
def test_collectives_ddp_zero_and_the_sampler_on_ranks(n, launcher):
    cases = "collectives ddp zero sampler"
    passed(ranks(n, RANKS, *cases.split(), launcher=launcher), n, cases)


@pytest.mark.parametrize("debug", ["0", "1"])
def test_ranks_that_pass_different_tensors_are_refused_naming_each_ranks(debug):
    passed(ranks(2, RANKS, "collectives", "mismatch", env={"TINYATTN_DISTRIBUTED_DEBUG": debug}), 2,
           "collectives mismatch")


def test_a_rank_that_raises_ends_the_world_printing_the_error_once():
    result = ranks(3, RANKS, "raise_on_one", launcher=True)
    assert result.returncode != 0
    assert result.stderr.count("rank 1 of 3 raised ValueError; ending all ranks") == 1
    assert result.stderr.count("ValueError: this rank's own error") == 1 and " ok " not in result.stdout


def test_nanogpts_ddp_path_on_two_ranks_trains_as_one_process_on_the_whole_batch(tmp_path):
    script = str(HERE / "ported_ddp_train.py")
    alone = subprocess.run([sys.executable, script, str(tmp_path / "one.npz")], capture_output=True, text=True,
                           timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert ranks(2, script, str(tmp_path / "two.npz"), launcher=True).returncode == 0
    one, two = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert sorted(one.files) == sorted(two.files) and "lm_head.weight" in one.files
    for name in one.files:
        assert np.allclose(two[name], one[name], rtol=1e-10, atol=1e-12), name


def test_import_tinyattn_does_not_import_mpi4py_and_without_it_one_line_says_what_to_install():
    probe = ("import sys, tinyattn; assert 'mpi4py' not in sys.modules and tinyattn.distributed.ReduceOp; "
             "sys.modules['mpi4py'] = None; import tinyattn.distributed as dist; assert not dist.is_available(); "
             "dist.init_process_group()")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=TIMEOUT,
                            env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert 'RuntimeError: tinyattn.distributed runs on MPI through mpi4py: pip install -e ".[distributed]"' in \
        result.stderr.splitlines()[-1]


@pytest.fixture
def world_of_one():
    dist.init_process_group(backend="mpi")
    yield
    dist.destroy_process_group()


def test_one_process_without_mpiexec_is_a_world_of_one(world_of_one):
    assert dist.is_available() and dist.is_initialized() and (dist.get_rank(), dist.get_world_size()) == (0, 1)
    t = ta.tensor([1.0, 2.0])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    dist.broadcast(t, src=0)
    gathered = [ta.zeros(2)]
    dist.all_gather(gathered, t)
    assert t.tolist() == [1.0, 2.0] and gathered[0].tolist() == [1.0, 2.0]
    model = ta.nn.Linear(3, 2)
    ddp = ta.nn.parallel.DistributedDataParallel(model)
    ddp(ta.ones(4, 3)).sum().backward()
    assert np.allclose(model.weight.grad.numpy(), 4.0)
    with pytest.raises(RuntimeError, match="twice"):
        dist.init_process_group()


def test_a_forward_without_backward_leaves_no_unfinished_reduction_with_unused_parameters(world_of_one):
    """find_unused_parameters: the unused are marked when the backward begins, as PyTorch does, so a forward whose
    loss is only looked at (no backward) does not make the next forward refuse."""
    class HalfUsed(ta.nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = ta.nn.Linear(3, 2), ta.nn.Linear(3, 2)

        def forward(self, x):
            return self.used(x)
    model = HalfUsed()
    ddp = ta.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    ddp(ta.ones(4, 3)).sum()                                       # looked at, never backpropagated
    ddp(ta.ones(4, 3)).sum().backward()
    assert np.allclose(model.used.weight.grad.numpy(), 4.0) and model.unused.weight.grad is None


def test_backends_and_worlds_that_cannot_be_are_refused():
    with pytest.raises(RuntimeError, match="has not been initialized"):
        dist.all_reduce(ta.zeros(1))
    with pytest.raises(RuntimeError, match='"nccl"'):
        dist.init_process_group(backend="nccl")
    with pytest.raises(ValueError, match="unknown backend 'tcp'"):
        dist.init_process_group(backend="tcp")
    with pytest.raises(ValueError, match=re.escape("(world_size=4), but MPI started this process with world_size 1")):
        dist.init_process_group(world_size=4)
    assert not dist.is_initialized()


def test_the_launcher_runs_mpiexec_on_the_bootstrap():
    line = run.command(run.parse(["--nproc_per_node", "3", "--mpiexec-args", "-bind-to core", "train.py", "--lr", "1"]))
    assert line[1:] == ["-n", "3", "-bind-to", "core", sys.executable, "-m", "tinyattn.distributed.bootstrap",
                        "train.py", "--lr", "1"] and os.access(line[0], os.X_OK)
    assert run.command(run.parse(["-m", "pkg.train"]))[-2:] == ["-m", "pkg.train"]


def test_bench_ddp_times_two_ranks_against_one_process_on_a_ranks_share():
    done = subprocess.run([sys.executable, "-m", "tinyattn.bench", "ddp", "--layers", "1", "--d-model", "16",
                           "--seq", "8", "--batch", "2", "--steps", "2", "--warmup", "0", "--bucket-cap-mb", "0.01"],
                          capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ,
                                                                                "PYTHONPATH": str(HERE.parent)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["nproc"] == 2 and result["buckets"] >= 2 and result["allreduce_alone_s"] > 0
    assert result["ddp_overhead_ratio"] == result["ranks_median_s"] / result["one_process_median_s"]
    assert result["ddp_over_independent"] == result["ranks_median_s"] / result["independent_median_s"]
