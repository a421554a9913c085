"""python -m tinyattn.bench with arguments a user gets wrong: one line per error naming the option, exit status 2
(as argparse's own errors), before anything runs (issue 31: tracebacks, and --heads 0 reported 0 GFLOP/s)."""
import subprocess
import sys

import pytest

import tinyattn as ta
from tinyattn import bench

WRONG = {
    "--reps 0": (["attention", "--reps", "0"], ["--reps must be at least 1, got 0"]),
    "--n -5 --dim 0": (["attention", "--n", "-5", "--dim", "0"],
                       ["--n must be at least 1, got -5", "--dim must be at least 1, got 0"]),
    "--heads 0": (["attention", "--heads", "0"], ["--heads must be at least 1, got 0"]),
    "--heads 3 --kv-heads 2": (["attention", "--heads", "3", "--kv-heads", "2"],
                               ["--kv-heads must be at least 1 and divide --heads"]),
    "--block-size 0": (["attention", "--block-size", "0"], ["--block-size must be at least 1"]),
    "--warmup -1": (["matmul", "--warmup", "-1"], ["--warmup must be at least 0, got -1"]),
    "train-step --steps 0": (["train-step", "--steps", "0"], ["--steps must be at least 1, got 0"]),
    "train-step --d-model 10 --heads 4": (["train-step", "--d-model", "10", "--heads", "4"],
                                          ["--d-model must be a multiple of --heads"]),
}


@pytest.mark.parametrize("name", WRONG)
def test_each_user_error_is_one_line_and_exit_status_2(name, capsys):
    argv, messages = WRONG[name]
    with pytest.raises(SystemExit) as stop:
        bench.parse(argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == len(messages)
    for line, message in zip(lines, messages):
        assert line.startswith(f"python -m tinyattn.bench {argv[0]}: error: ") and message in line


@pytest.mark.skipif(ta.cuda_is_available(), reason="this machine has a GPU")
def test_device_cuda_without_a_gpu_is_a_user_error(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.parse(["attention", "--device", "cuda"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == ("python -m tinyattn.bench attention: error: --device cuda: tinyattn "
                                              "sees no GPU here (run with --device cpu)")


def test_right_arguments_pass_and_the_command_line_prints_no_traceback():
    assert bench.parse(["attention", "--heads", "4", "--kv-heads", "2", "--n", "8"]).kv_heads == 2
    done = subprocess.run([sys.executable, "-m", "tinyattn.bench", "attention", "--reps", "0"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.strip() == "python -m tinyattn.bench attention: error: --reps must be at least 1, got 0"
