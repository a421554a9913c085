"""What every lesson shares: its command line (--quick, --seed, --gallery), where figures go, the line that says what
the run ran on, progress bars, the RESULT line."""
import argparse
import json
import os
import sys

from tqdm.auto import tqdm

import tinyattn
import tinyattn.environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOTS = os.path.join(ROOT, "plots")


def options(description=""):
    """The lesson's command line. --quick (or TINYATTN_QUICK=1): a tiny configuration for smoke tests (seconds);
    otherwise the real one (minutes on 2 CPU cores). --seed N seeds tinyattn's generators and the lesson's own.
    Figures go to plots/runs/ (plots/runs/quick/ for quick runs), which git ignores, so a run leaves the repository as
    it was; --gallery writes them to plots/, the README's gallery, for a maintainer who refreshes it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", default=os.environ.get("TINYATTN_QUICK") == "1",
                        help="tiny configuration that finishes in seconds (also: TINYATTN_QUICK=1)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("TINYATTN_SEED", 0)),
                        help="seed of every random draw of the run (default 0)")
    parser.add_argument("--gallery", action="store_true", help="write the figures to plots/, the README's gallery")
    parser.add_argument("--plots", default=os.environ.get("TINYATTN_PLOTS"), help="folder for the figures")
    args, _ = parser.parse_known_args()   # tolerate a notebook kernel's own arguments
    runs = os.path.join(PLOTS, "runs")
    args.plots = args.plots or (PLOTS if args.gallery else os.path.join(runs, "quick") if args.quick else runs)
    os.makedirs(args.plots, exist_ok=True)
    tinyattn.manual_seed(args.seed)
    tinyattn.cpu.tune_allocator()   # a lesson is a whole program: let glibc keep freed memory (tinyattn/cpu/tuning.py)
    print(tinyattn.environment.line() + f" · seed {args.seed}" + (" · quick" if args.quick else ""), flush=True)
    return args


def plot_path(args, name):
    return os.path.join(args.plots, name)


def progress(iterable, **kwargs):
    """A tqdm progress bar (to stderr, so the lesson's printed results stay readable)."""
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, mininterval=0.5, **kwargs)


def report(**metrics):
    """Print the lesson's closing line: RESULT {json} with every measured number."""
    line = "RESULT " + json.dumps({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in metrics.items()})
    print(line, flush=True)
    return metrics
