"""The performance method of docs/performance.md in one command: `python -m tinyattn.bench_rounds --peer-python PATH`.

Each round runs every workload with tinyattn and then with its peer, each run in a process of its own
(`python -m tinyattn.bench ...`), for every instruction set asked for; the table gives, per workload and instruction
set, the median of the rounds' own ratios (and their range), which cancels most of a machine's drift from round to
round, and the ratio of the two medians beside it. The last output line is JSON.

Workloads (issue 30's, with its targets):
  d128   a GPT train step at D=128 against PyTorch's                          at most 1.25x
  d256   a GPT train step at D=256 against PyTorch's                          at most 1.1x
  flash  flash attention forward and backward against PyTorch's SDPA          at most 1.0x
  parts  flash attention against tinyattn's own SDPA in parts (no PyTorch)    at most 1.0x

Instruction sets: `native` lets every library pick its own kernels; `avx2` imitates an AVX2 CPU on an AVX-512 one
(OpenBLAS's Haswell kernels, NumPy without its AVX-512 loops, by NumPy 2.4's names for them, and PyTorch held to
AVX2). An imitation runs AVX2's instructions, not an AVX2 CPU's caches, clocks and cores: it is not a measurement of
an AVX2 CPU, and the table says which rows are imitated. PyTorch runs in an environment of its own (--peer-python:
its python), never in tinyattn's; both processes import this copy of tinyattn.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass

from . import environment

_D128 = "train-step --vocab 256 --d-model 128 --layers 4 --heads 4 --seq 128 --batch 8 --steps 20"
_D256 = "train-step --vocab 256 --d-model 256 --layers 4 --heads 8 --seq 256 --batch 16 --steps 5"
_ATTENTION = "attention --n 4096 --heads 8 --dim 64 --causal"
RUN_TIMEOUT_S = 1800                # one `python -m tinyattn.bench` run; the largest here takes some 15 s


@dataclass(frozen=True)
class Workload:
    """tinyattn's `python -m tinyattn.bench` arguments, the peer's (run by PyTorch's python when peer_framework is
    "torch", else by tinyattn's), and the ratio tinyattn's time must stay within."""
    description: str
    tinyattn_args: str
    peer_framework: str
    peer_args: str
    target: float


WORKLOADS = {
    "d128": Workload("GPT train step, D=128", _D128, "torch", _D128 + " --framework torch", 1.25),
    "d256": Workload("GPT train step, D=256", _D256, "torch", _D256 + " --framework torch", 1.1),
    "flash": Workload("flash attention against PyTorch's SDPA", f"{_ATTENTION} --impl flash --reps 5", "torch",
                      f"{_ATTENTION} --reps 5 --framework torch", 1.0),
    "parts": Workload("flash attention against tinyattn's SDPA in parts", f"{_ATTENTION} --impl flash --reps 5",
                      "tinyattn", f"{_ATTENTION} --impl sdpa --reps 3", 1.0),
}

# What each instruction set sets in the environment, per framework. Every variable named here is removed first, so
# that `native` is native even on a machine that sets OPENBLAS_CORETYPE itself; so is TINYATTN_REFERENCE, which
# would time the reference twins instead of the fast path.
IMITATED_AVX2 = {
    "tinyattn": {"OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"},
    "torch": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
_CLEARED = {"OPENBLAS_L2_SIZE", "TINYATTN_REFERENCE", *IMITATED_AVX2["tinyattn"], *IMITATED_AVX2["torch"]}
ISAS = {"native": "native", "avx2": "AVX2 imitated"}     # each instruction set and what the table calls it
PROG = "python -m tinyattn.bench_rounds"


def environment_for(framework, isa):
    """The environment a run of framework gets under isa, with this copy of tinyattn first on the import path."""
    env = {name: value for name, value in os.environ.items() if name not in _CLEARED}
    if isa == "avx2":
        env.update(IMITATED_AVX2[framework])
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def bench_once(python, arguments, env):
    """One `python -m tinyattn.bench` run in a process of its own: its JSON result (its last line of output)."""
    command = [python, "-m", "tinyattn.bench", *arguments.split()]
    shown = " ".join(command)
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{shown} ran past {RUN_TIMEOUT_S} s") from None
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{shown} failed with exit status {done.returncode}:\n{tail}")
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
        if not result["median_s"] > 0:
            raise ValueError(f"a median time of {result['median_s']}")
    except (IndexError, KeyError, TypeError, ValueError) as error:
        raise RuntimeError(f"{shown} printed no result ({error}); its output ended: {lines[-3:]}") from None
    return result


def run_rounds(workloads, isas, rounds, peer_python, bench=None, log=None, runs=None):
    """{(workload name, isa): [(tinyattn's result, the peer's) per round]}: in each round, each isa in turn, each
    workload's tinyattn run and then its peer's. Workloads whose tinyattn run is the same share it within a round
    and isa. Results go into runs (a dict given, or a new one) as they come, so that a caller keeps them if a later
    run fails. bench runs one (bench_once unless given)."""
    bench, runs = bench or bench_once, {} if runs is None else runs
    for name in workloads:
        for isa in isas:
            runs[name, isa] = []
    for round_number in range(1, rounds + 1):
        for isa in isas:
            ours = {}
            for name, workload in workloads.items():
                if workload.tinyattn_args not in ours:
                    ours[workload.tinyattn_args] = bench(sys.executable, workload.tinyattn_args,
                                                         environment_for("tinyattn", isa))
                python = peer_python if workload.peer_framework == "torch" else sys.executable
                theirs = bench(python, workload.peer_args, environment_for(workload.peer_framework, isa))
                runs[name, isa].append((ours[workload.tinyattn_args], theirs))
                if log:
                    log(f"round {round_number} {isa} {name}: {ours[workload.tinyattn_args]['median_s']:.4f} s "
                        f"against {theirs['median_s']:.4f} s")
    return runs


def summarize(workloads, runs):
    """One row per workload and isa with at least one round: the medians, the median of the rounds' ratios with its
    range, the ratio of the medians, memory, and whether the target holds (by the median of the ratios)."""
    rows = []
    for (name, isa), pairs in runs.items():
        if not pairs:
            continue
        ours = [a["median_s"] for a, _ in pairs]
        theirs = [b["median_s"] for _, b in pairs]
        ratios = [a / b for a, b in zip(ours, theirs)]
        ratio = statistics.median(ratios)
        rows.append({"workload": name, "isa": isa, "rounds": len(pairs),
                     "tinyattn_s": statistics.median(ours), "peer_s": statistics.median(theirs),
                     "tinyattn_extra_mib": statistics.median(a["extra_mib"] for a, _ in pairs),
                     "peer_extra_mib": statistics.median(b["extra_mib"] for _, b in pairs),
                     "tinyattn_traced_peak_mib": statistics.median(a["traced_peak_mib"] for a, _ in pairs),
                     "peer_traced_peak_mib": statistics.median(b["traced_peak_mib"] for _, b in pairs),
                     "ratio": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
                     "ratio_of_medians": statistics.median(ours) / statistics.median(theirs),
                     "target": workloads[name].target, "met": ratio <= workloads[name].target})
    return rows


def machine_lines(runs):
    """Per isa: which CPU, tinyattn's threads and kernels, and PyTorch's version, kernels and threads where PyTorch
    ran, from the runs' own reports."""
    lines = []
    for isa in ISAS:
        pairs = [pair for (_, run_isa), run_pairs in runs.items() if run_isa == isa for pair in run_pairs]
        if not pairs:
            continue
        m = pairs[0][0]["machine"]
        simd = m["numpy_simd"][-1] if m.get("numpy_simd") else "baseline"
        text = (f"{ISAS[isa]}: {m['cpu']} ({m['isa']}); tinyattn "
                f"{m['threads']} threads, NumPy {m['numpy']} with its {simd} loops, {m['blas'].get('name')} "
                f"{m['blas'].get('kernel')} kernel")
        torch = next((b["machine"] for _, b in pairs if "torch" in b["machine"]), None)
        if torch:
            text += f"; PyTorch {torch['torch']} at {torch['cpu_capability']}, {torch['threads']} threads"
        lines.append(text)
    return lines


def table(workloads, rows):
    """The rows as a Markdown table, in the columns of docs/performance.md."""
    lines = ["| workload | ISA | tinyattn | peer | ratio (rounds' range); of the medians | target |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        verdict = "met" if row["met"] else "**not met**"
        lines.append(f"| {workloads[row['workload']].description}, {row['rounds']} rounds | {ISAS[row['isa']]} | "
                     f"{row['tinyattn_s']:.4f} s, {row['tinyattn_extra_mib']:.0f} MiB extra, "
                     f"{row['tinyattn_traced_peak_mib']:.0f} MiB traced peak | "
                     f"{row['peer_s']:.4f} s, {row['peer_extra_mib']:.0f} MiB extra, "
                     f"{row['peer_traced_peak_mib']:.0f} MiB traced peak | "
                     f"{row['ratio']:.2f}x ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}); "
                     f"{row['ratio_of_medians']:.2f}x | {row['target']}x: {verdict} |")
    return "\n".join(lines)


def parse(argv):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", metavar="PATH",
                        help="the python of an environment with PyTorch (needed for d128, d256 and flash)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every workload (default 5)")
    parser.add_argument("--workload", nargs="+", action="extend", choices=list(WORKLOADS),
                        help="which workloads (default: all, in this order: " + ", ".join(WORKLOADS) + ")")
    parser.add_argument("--isa", nargs="+", action="extend", choices=list(ISAS),
                        help="native, avx2 (imitated) or both (default: native, and avx2 too where the CPU has "
                             "AVX-512)")
    parser.add_argument("--out", metavar="DIR", help="a folder for every run's JSON (runs.json) and the summary")
    args = parser.parse_args(argv)
    cpu_isa = environment.cpu_model()[1]
    args.workload = list(dict.fromkeys(args.workload or WORKLOADS))          # each once, in the order given
    args.isa = list(dict.fromkeys(args.isa or (["native", "avx2"] if cpu_isa == "AVX-512" else ["native"])))
    errors = []
    if args.rounds < 1:
        errors.append(f"--rounds must be at least 1, got {args.rounds}")
    if "avx2" in args.isa and cpu_isa != "AVX-512":
        errors.append(f"--isa avx2 imitates an AVX2 CPU on an AVX-512 one; this CPU's widest is {cpu_isa}: use "
                      f"--isa native")
    needs_torch = [name for name in args.workload if WORKLOADS[name].peer_framework == "torch"]
    if needs_torch and not args.peer_python:
        errors.append(f"--peer-python is needed for {', '.join(needs_torch)} (the python of an environment with "
                      f"PyTorch), or pick --workload parts")
    elif needs_torch:
        found = shutil.which(args.peer_python)
        if found is None:
            errors.append(f"--peer-python {args.peer_python} is not a python this user can run")
        elif subprocess.run([found, "-c", "import torch"], capture_output=True).returncode:
            errors.append(f"--peer-python {args.peer_python} cannot import torch (pip install torch==2.13.0 in "
                          f"that environment)")
        else:
            args.peer_python = found
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        errors.append(f"--out {args.out} is a file, not a folder")
    for error in errors:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
    if errors:
        sys.exit(2)
    return args


def _write(folder, runs, summary):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "runs.json"), "w") as f:
        json.dump([{"workload": name, "isa": isa, "round": i + 1, "tinyattn": ours, "peer": theirs}
                   for (name, isa), pairs in runs.items() for i, (ours, theirs) in enumerate(pairs)], f, indent=1)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    workloads = {name: WORKLOADS[name] for name in args.workload}
    runs = {}
    try:
        run_rounds(workloads, args.isa, args.rounds, args.peer_python, runs=runs,
                   log=lambda text: print(text, file=sys.stderr, flush=True))
    except (RuntimeError, KeyboardInterrupt) as error:
        print(f"{PROG}: stopped: {error}", file=sys.stderr)
        if args.out:
            _write(args.out, runs, {"rows": summarize(workloads, runs), "machine": machine_lines(runs),
                                    "stopped": str(error)})
            print(f"the rounds finished so far are in {args.out}", file=sys.stderr)
        sys.exit(1)
    summary = {"rows": summarize(workloads, runs), "machine": machine_lines(runs)}
    print("\n".join(summary["machine"]))
    print(table(workloads, summary["rows"]))
    if args.out:
        _write(args.out, runs, summary)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
