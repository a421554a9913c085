"""The README's performance method in one command: `python -m tinyattn.bench_rounds --peer-python PATH`.

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
(OpenBLAS's Haswell kernels, NumPy without its AVX-512 loops, PyTorch held to AVX2). An imitation runs AVX2's
instructions, not an AVX2 CPU's caches, clocks and cores: it is not a measurement of an AVX2 CPU, and the table
says which rows are imitated. PyTorch runs in an environment of its own (--peer-python: its python), never in
tinyattn's; both processes import this copy of tinyattn.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

from . import environment

_D128 = "train-step --vocab 256 --d-model 128 --layers 4 --heads 4 --seq 128 --batch 8 --steps 20"
_D256 = "train-step --vocab 256 --d-model 256 --layers 4 --heads 8 --seq 256 --batch 16 --steps 5"
_ATTENTION = "attention --n 4096 --heads 8 --dim 64 --causal"


@dataclass(frozen=True)
class Workload:
    """tinyattn's `python -m tinyattn.bench` arguments, its peer's (run by PyTorch's python when peer is "torch",
    else by tinyattn's), and the ratio tinyattn's time must stay within."""
    what: str
    ours: str
    peer: str
    theirs: str
    target: float


WORKLOADS = {
    "d128": Workload("GPT train step, D=128", _D128, "torch", _D128 + " --framework torch", 1.25),
    "d256": Workload("GPT train step, D=256", _D256, "torch", _D256 + " --framework torch", 1.1),
    "flash": Workload("flash attention against PyTorch's SDPA", f"{_ATTENTION} --impl flash --reps 5", "torch",
                      f"{_ATTENTION} --reps 5 --framework torch", 1.0),
    "parts": Workload("flash attention against tinyattn's SDPA in parts", f"{_ATTENTION} --impl flash --reps 5",
                      "tinyattn", f"{_ATTENTION} --impl naive --reps 3", 1.0),
}

# What each instruction set sets in the environment, per framework; every variable named anywhere here is removed
# first, so that `native` is native even on a machine that sets OPENBLAS_CORETYPE itself.
IMITATED_AVX2 = {
    "tinyattn": {"OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"},
    "torch": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
_CLEARED = {"OPENBLAS_L2_SIZE", *IMITATED_AVX2["tinyattn"], *IMITATED_AVX2["torch"]}
ISAS = ("native", "avx2")


def environment_for(framework, isa):
    """The environment a run of framework gets under isa, with this copy of tinyattn first on the import path."""
    env = {name: value for name, value in os.environ.items() if name not in _CLEARED}
    if isa == "avx2":
        env.update(IMITATED_AVX2[framework])
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def bench_once(python, arguments, env):
    """One `python -m tinyattn.bench` run in a process of its own: its JSON result."""
    command = [python, "-m", "tinyattn.bench", *arguments.split()]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(command)} failed with exit status {done.returncode}:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_rounds(workloads, isas, rounds, peer_python, bench=bench_once, log=None):
    """{(workload name, isa): [(ours, theirs) per round]}: in each round, each isa in turn, each workload's run and
    then its peer's. Workloads whose tinyattn run is the same share it within a round and isa."""
    runs = {(name, isa): [] for name in workloads for isa in isas}
    for round_number in range(1, rounds + 1):
        for isa in isas:
            done = {}
            for name, workload in workloads.items():
                if workload.ours not in done:
                    done[workload.ours] = bench(sys.executable, workload.ours, environment_for("tinyattn", isa))
                python = peer_python if workload.peer == "torch" else sys.executable
                theirs = bench(python, workload.theirs, environment_for(workload.peer, isa))
                runs[name, isa].append((done[workload.ours], theirs))
                if log:
                    log(f"round {round_number} {isa} {name}: {done[workload.ours]['median_s']:.4f} s against "
                        f"{theirs['median_s']:.4f} s")
    return runs


def summarize(workloads, runs):
    """One row per workload and isa: the medians, the median of the rounds' ratios with its range, the ratio of the
    medians, memory, and whether the target holds (by the median of the ratios)."""
    rows = []
    for (name, isa), pairs in runs.items():
        ours = [a["median_s"] for a, _ in pairs]
        theirs = [b["median_s"] for _, b in pairs]
        ratios = [a / b for a, b in zip(ours, theirs)]
        ratio = statistics.median(ratios)
        rows.append({"workload": name, "isa": isa, "rounds": len(pairs),
                     "tinyattn_s": statistics.median(ours), "peer_s": statistics.median(theirs),
                     "tinyattn_extra_mib": statistics.median(a["extra_mib"] for a, _ in pairs),
                     "peer_extra_mib": statistics.median(b["extra_mib"] for _, b in pairs),
                     "ratio": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
                     "ratio_of_medians": statistics.median(ours) / statistics.median(theirs),
                     "target": workloads[name].target, "met": ratio <= workloads[name].target})
    return rows


def machine_lines(runs):
    """Which CPU, and which kernels each isa ran, from the runs' own reports."""
    lines, seen = [], set()
    for (_, isa), pairs in runs.items():
        if isa in seen or not pairs:
            continue
        seen.add(isa)
        ours, theirs = pairs[0]
        m = ours["machine"]
        simd = m["numpy_simd"][-1] if m.get("numpy_simd") else "baseline"
        peer = theirs["machine"]
        peer_text = (f"PyTorch {peer['torch']} at {peer['cpu_capability']}" if "torch" in peer
                     else "tinyattn as its own peer")
        label = "AVX2 imitated" if isa == "avx2" else "native"
        lines.append(f"{label}: {m['cpu']} ({m['isa']}), {m['threads']} threads; NumPy {m['numpy']} with its "
                     f"{simd} loops, {m['blas'].get('name')} {m['blas'].get('kernel')} kernel; {peer_text}")
    return lines


def table(workloads, rows):
    """The rows as a Markdown table, in the README's columns."""
    lines = ["| workload | ISA | tinyattn | peer | ratio (rounds' range); of the medians | target |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        label = "AVX2 imitated" if row["isa"] == "avx2" else "native"
        verdict = "met" if row["met"] else "**not met**"
        lines.append(f"| {workloads[row['workload']].what}, {row['rounds']} rounds | {label} | "
                     f"{row['tinyattn_s']:.4f} s, {row['tinyattn_extra_mib']:.0f} MiB extra | "
                     f"{row['peer_s']:.4f} s, {row['peer_extra_mib']:.0f} MiB extra | "
                     f"{row['ratio']:.2f}x ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}); "
                     f"{row['ratio_of_medians']:.2f}x | {row['target']}x: {verdict} |")
    return "\n".join(lines)


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tinyattn.bench_rounds", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", help="the python of an environment with PyTorch (for d128, d256, flash)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workload", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--isa", nargs="+", choices=ISAS, default=None,
                        help="default: native, and avx2 too where the CPU has AVX-512")
    parser.add_argument("--out", help="a folder for every run's JSON and the summary")
    args = parser.parse_args(argv)
    cpu_isa = environment.cpu_model()[1]
    if args.isa is None:
        args.isa = ["native", "avx2"] if cpu_isa == "AVX-512" else ["native"]
    errors = []
    if args.rounds < 1:
        errors.append(f"--rounds must be at least 1, got {args.rounds}")
    if "avx2" in args.isa and cpu_isa != "AVX-512":
        errors.append(f"--isa avx2 imitates an AVX2 CPU on an AVX-512 one; this CPU's widest is {cpu_isa}, so "
                      f"native is what it runs")
    needs_torch = [name for name in args.workload if WORKLOADS[name].peer == "torch"]
    if needs_torch and not args.peer_python:
        errors.append(f"--peer-python is needed for {', '.join(needs_torch)} (the python of an environment with "
                      f"PyTorch), or pick --workload parts")
    elif needs_torch and not (os.path.isfile(args.peer_python) and os.access(args.peer_python, os.X_OK)):
        errors.append(f"--peer-python {args.peer_python} is not a python this user can run")
    for error in errors:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
    if errors:
        sys.exit(2)
    return args


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    workloads = {name: WORKLOADS[name] for name in args.workload}
    runs = run_rounds(workloads, args.isa, args.rounds, args.peer_python,
                      log=lambda text: print(text, file=sys.stderr, flush=True))
    rows = summarize(workloads, runs)
    print("\n".join(machine_lines(runs)))
    print(table(workloads, rows))
    summary = {"rows": rows, "machine": machine_lines(runs)}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "runs.json"), "w") as f:
            json.dump([{"workload": name, "isa": isa, "round": i + 1, "tinyattn": ours, "peer": theirs}
                       for (name, isa), pairs in runs.items() for i, (ours, theirs) in enumerate(pairs)], f, indent=1)
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
