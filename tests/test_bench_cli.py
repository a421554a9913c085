"""python -m tinyattn.bench with arguments a user gets wrong: one line per error naming the option, exit status 2
(as argparse's own errors), before anything runs (issue 31: tracebacks, and --heads 0 reported 0 GFLOP/s); and
python -m tinyattn.bench_rounds, which runs the README's method (rounds of runs, each in a process of its own)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.tools import bench, bench_rounds

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
    "ddp --nproc 0 --d-model 10": (["ddp", "--nproc", "0", "--d-model", "10"],
                                   ["--nproc must be at least 1, got 0", "--d-model must be a multiple of --heads"]),
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


def test_the_traced_peak_counts_what_the_step_allocates_not_what_it_frees_of_older_memory():
    work = bench.Workload("tinyattn", "cpu")
    before = [np.ones(2 ** 20 // 8)]                             # 1 MiB, allocated before the step

    def step():
        before.pop()                                             # freed in the step: not subtracted
        a = np.ones(3 * 2 ** 20 // 8)
        b = a + 1                                                # 3 + 3 MiB at once
        del a, b
        np.ones(2 ** 20 // 8)

    assert 6 <= work.traced_peak_mib(step) < 6.1


# -- python -m tinyattn.bench_rounds: the README's method (rounds, each run in its own process) in one command ------
TINY = bench_rounds.Workload("tiny flash against SDPA in parts", "attention --impl flash --n 64 --heads 2 --dim 8 "
                             "--reps 1 --warmup 0", "tinyattn", "attention --impl sdpa --n 64 --heads 2 --dim 8 "
                             "--reps 1 --warmup 0", 1.0)


def _fake_result(seconds, mib=10.0, machine=None):
    return {"median_s": seconds, "extra_mib": mib, "traced_peak_mib": mib / 2, "machine": machine or {}}


def test_rounds_run_ours_then_the_peer_each_isa_in_turn_with_the_imitation_set_per_framework(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")              # a machine's own setting: native must drop it
    monkeypatch.setenv("TINYATTN_REFERENCE", "1")               # left from a lesson: would time the twins
    calls = []

    def bench(python, arguments, env):
        calls.append((python, arguments, env))
        return _fake_result(0.5)
    workloads = {name: bench_rounds.WORKLOADS[name] for name in ("flash", "parts")}
    runs = bench_rounds.run_rounds(workloads, ["native", "avx2"], 2, "/peer/python", bench=bench)
    flash, parts = workloads["flash"], workloads["parts"]
    one_round = [(sys.executable, flash.tinyattn_args), ("/peer/python", flash.peer_args),
                 (sys.executable, parts.peer_args)]
    assert [(python, arguments) for python, arguments, _ in calls] == one_round * 4      # flash's run shared
    assert {key: len(pairs) for key, pairs in runs.items()} == {
        ("flash", "native"): 2, ("flash", "avx2"): 2, ("parts", "native"): 2, ("parts", "avx2"): 2}
    for python, arguments, env in calls:
        assert env["PYTHONPATH"].split(os.pathsep)[0] == os.path.dirname(os.path.dirname(ta.__file__))
        assert ("--framework torch" in arguments) == (python == "/peer/python")
        assert "TINYATTN_REFERENCE" not in env
    native, imitated = calls[:3], calls[3:6]
    for _, _, env in native:
        assert not {"OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "ATEN_CPU_CAPABILITY"} & set(env)
    (_, _, ours), (_, _, torch_env), (_, _, parts_env) = imitated
    assert ours["OPENBLAS_CORETYPE"] == "Haswell"
    assert ours["NPY_DISABLE_CPU_FEATURES"] == "X86_V4 AVX512_ICL AVX512_SPR" and "ATEN_CPU_CAPABILITY" not in ours
    assert parts_env["OPENBLAS_CORETYPE"] == "Haswell" and "OPENBLAS_CORETYPE" not in torch_env
    assert torch_env["ATEN_CPU_CAPABILITY"] == "avx2" and torch_env["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def test_the_summary_is_the_median_of_the_rounds_ratios_with_their_range_and_the_ratio_of_the_medians():
    workloads = {"flash": bench_rounds.WORKLOADS["flash"], "d128": bench_rounds.WORKLOADS["d128"]}
    runs = {("flash", "native"): [(_fake_result(a), _fake_result(b, 20.0)) for a, b in ((1.0, 1.0), (1.2, 1.0),
                                                                                       (0.9, 1.0))],
            ("d128", "native"): [(_fake_result(a), _fake_result(b)) for a, b in ((2.6, 2.0), (2.6, 2.0), (2.6, 6.0))],
            ("d128", "avx2"): []}                                              # not run: no row
    flash, d128 = bench_rounds.summarize(workloads, runs)
    assert flash["ratio"] == 1.0 and flash["met"] and (flash["ratio_min"], flash["ratio_max"]) == (0.9, 1.2)
    assert flash["peer_extra_mib"] == 20.0 and flash["peer_traced_peak_mib"] == 10.0 and flash["rounds"] == 3
    assert d128["ratio"] == pytest.approx(1.3) and not d128["met"] and d128["target"] == 1.25
    assert d128["ratio_of_medians"] == pytest.approx(1.3) and d128["ratio_min"] == pytest.approx(2.6 / 6)
    text = bench_rounds.table(workloads, [flash, d128])
    assert "| GPT train step, D=128, 3 rounds | native |" in text and "1.25x: **not met**" in text
    assert "2.6000 s, 10 MiB extra, 5 MiB traced peak | 2.0000 s, 10 MiB extra, 5 MiB traced peak |" in text


def test_the_machine_lines_name_pytorch_where_any_workload_ran_it():
    ours = {"cpu": "AMD EPYC, family 25 model 17", "isa": "AVX-512", "threads": 2, "numpy": "2.4.6",
            "numpy_simd": ["X86_V3"], "blas": {"name": "openblas", "kernel": "Haswell"}}
    torch = {"cpu": "AMD EPYC", "isa": "AVX-512", "torch": "2.13.0+cpu", "threads": 3, "cpu_capability": "AVX2"}
    runs = {("parts", "avx2"): [(_fake_result(1.0, machine=ours), _fake_result(1.0, machine=ours))],
            ("flash", "avx2"): [(_fake_result(1.0, machine=ours), _fake_result(1.0, machine=torch))]}
    (line,) = bench_rounds.machine_lines(runs)
    assert line == ("AVX2 imitated: AMD EPYC, family 25 model 17 (AVX-512); tinyattn 2 threads, NumPy 2.4.6 with its "
                    "X86_V3 loops, openblas Haswell kernel; PyTorch 2.13.0+cpu at AVX2, 3 threads")
    del runs["flash", "avx2"]
    assert "PyTorch" not in bench_rounds.machine_lines(runs)[0]


def test_a_real_round_in_processes_of_their_own_gives_a_table_naming_the_machine():
    runs = bench_rounds.run_rounds({"tiny": TINY}, ["native"], 1, None)
    (ours, theirs), = runs["tiny", "native"]
    assert ours["impl"] == "flash" and theirs["impl"] == "sdpa" and ours["median_s"] > 0 and theirs["median_s"] > 0
    (line,) = bench_rounds.machine_lines(runs)
    assert line.startswith("native: ") and "kernel" in line and "PyTorch" not in line
    (row,) = bench_rounds.summarize({"tiny": TINY}, runs)
    assert row["ratio"] == pytest.approx(ours["median_s"] / theirs["median_s"])


def test_a_failed_run_names_its_command_and_what_it_printed(monkeypatch):
    env = bench_rounds.environment_for("tinyattn", "native")
    with pytest.raises(RuntimeError, match=r"tinyattn.bench attention --reps 0 failed with exit status 2:\n.*"
                                           r"--reps must be at least 1"):
        bench_rounds.bench_once(sys.executable, "attention --reps 0", env)
    run = subprocess.run                                # a bench that ends without its JSON line
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: run([sys.executable, "-c", "print('done')"], **kw))
    with pytest.raises(RuntimeError, match=r"tinyattn.bench attention printed no result .*'done'"):
        bench_rounds.bench_once(sys.executable, "attention", env)


def test_a_stopped_run_keeps_the_rounds_finished_so_far_and_exits_1(tmp_path, monkeypatch, capsys):
    calls = []

    def bench(python, arguments, env):
        calls.append(arguments)
        if len(calls) == 3:
            raise RuntimeError("python -m tinyattn.bench ... failed with exit status 1")
        return _fake_result(0.5, machine={"cpu": "c", "isa": "AVX2", "threads": 2, "numpy": "2", "blas": {}})
    monkeypatch.setattr(bench_rounds, "bench_once", bench)
    monkeypatch.setattr(bench_rounds.environment, "cpu_model", lambda: ("some CPU", "AVX2"))
    with pytest.raises(SystemExit) as stop:
        bench_rounds.main(["--workload", "parts", "--rounds", "3", "--out", str(tmp_path / "out")])
    assert stop.value.code == 1 and "stopped: python -m tinyattn.bench ... failed" in capsys.readouterr().err
    runs = json.loads((tmp_path / "out" / "runs.json").read_text())
    assert [(run["workload"], run["round"]) for run in runs] == [("parts", 1)]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["rows"][0]["rounds"] == 1


@pytest.mark.parametrize("argv, cpu_isa, message", [
    (["--workload", "parts", "--rounds", "0"], "AVX-512", "--rounds must be at least 1, got 0"),
    (["--workload", "parts", "--isa", "avx2"], "AVX2", "--isa avx2 imitates an AVX2 CPU on an AVX-512 one; this "
                                                       "CPU's widest is AVX2: use --isa native"),
    (["--workload", "flash", "parts"], "AVX-512", "--peer-python is needed for flash"),
    (["--workload", "d128", "--peer-python", "/no/such/python"], "AVX-512", "--peer-python /no/such/python is not"),
    (["--workload", "d128", "--peer-python", sys.executable], "AVX-512", "cannot import torch"),
])
def test_rounds_user_errors_are_one_line_and_exit_status_2(argv, cpu_isa, message, monkeypatch, capsys):
    monkeypatch.setattr(bench_rounds.environment, "cpu_model", lambda: ("some CPU", cpu_isa))
    with pytest.raises(SystemExit) as stop:
        bench_rounds.parse(argv)
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("python -m tinyattn.bench_rounds: error: ") and message in line


def test_rounds_take_each_workload_and_isa_once_and_the_imitation_by_default_only_on_an_avx512_cpu(monkeypatch):
    for cpu_isa, isas in (("AVX-512", ["native", "avx2"]), ("AVX2", ["native"])):
        monkeypatch.setattr(bench_rounds.environment, "cpu_model", lambda: ("some CPU", cpu_isa))
        assert bench_rounds.parse(["--workload", "parts"]).isa == isas
    args = bench_rounds.parse(["--workload", "parts", "parts", "--isa", "native", "--isa", "native"])
    assert args.workload == ["parts"] and args.isa == ["native"]
