"""What every lesson shares: its command line (--quick), where figures go, progress bars, the RESULT line."""
import argparse
import json
import os
import sys

from tqdm.auto import tqdm

import tinyattn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOTS = os.path.join(ROOT, "plots")


def options(description=""):
    """--quick: a tiny configuration for smoke tests (seconds); otherwise the real one (minutes on 2 CPU cores)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny configuration that finishes in seconds")
    parser.add_argument("--plots", default=os.environ.get("TINYATTN_PLOTS"),
                        help="folder for figures (default plots/, or plots/quick/ with --quick)")
    args, _ = parser.parse_known_args()   # tolerate a notebook kernel's own arguments
    # Quick runs keep out of plots/, whose figures come from the real runs and are shown in the README.
    args.plots = args.plots or (os.path.join(PLOTS, "quick") if args.quick else PLOTS)
    os.makedirs(args.plots, exist_ok=True)
    tinyattn.cpu.tune_allocator()   # a lesson is a whole program: let glibc keep freed memory (tinyattn/cpu/tuning.py)
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
