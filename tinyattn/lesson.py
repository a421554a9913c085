"""What every lesson shares, as a module of the package so a lesson runs the same as a script, stepped cell by cell,
or as a notebook saved anywhere: its command line (--quick, --seed, --gallery), where figures go, the line that says
what the run ran on (and which tinyattn folder it imported), progress bars, and the closing RESULT line.

`from tinyattn.lesson import options, plot_path, progress, quick_note, report` at the top of a lesson.
"""
import argparse
import difflib
import json
import os
import sys
import tempfile

from . import cpu
from .tools import environment
from .backend import generator, manual_seed
from .hub import PretrainedError
from .serialization import CheckpointError
from .viz.display import in_notebook, static_page

PACKAGE = os.path.dirname(os.path.abspath(__file__))  # the tinyattn folder this process imported
ROOT = os.path.dirname(PACKAGE)
LESSONS = os.path.join(ROOT, "lessons")          # present in a clone, where the lessons live


def _plots():
    """The repository's plots/ in a clone; plots/ under the current folder for an installed copy."""
    return os.path.join(ROOT if os.path.isdir(LESSONS) else os.getcwd(), "plots")


def options(description="", arguments=()):
    """The lesson's command line. --quick (or TINYATTN_QUICK=1): a tiny configuration for smoke tests (seconds);
    otherwise the real one (minutes on 2 CPU cores). --seed N seeds tinyattn's generators; lessons seed their own
    from args.seed too. Figures go to plots/runs/ (plots/runs/quick/ for quick runs), which git ignores, so a run
    leaves the repository as it was; --gallery writes them to plots/, the README's gallery (for the maintainer who
    refreshes it from default runs). arguments: the lesson's own options, each a pair (flag, argparse settings),
    e.g. ("--steps", dict(type=int, default=100, help="training steps")). An option the lesson does not have stops
    the run with one line naming it (exit 2), except inside a notebook kernel, whose own arguments are not ours.
    From here on Ctrl-C stops the run with one line (exit 130), as `python -m lessons NN` does. The first line
    printed says what the run runs on."""
    every = [("--quick", dict(action="store_true", default=os.environ.get("TINYATTN_QUICK") == "1",
                              help="tiny configuration that finishes in seconds (also: TINYATTN_QUICK=1)")),
             ("--seed", dict(type=int, default=int(os.environ.get("TINYATTN_SEED", 0)),
                             help="seed of every random draw of the run (default 0)")),
             ("--gallery", dict(action="store_true", help="write the figures to plots/, the README's gallery")),
             ("--plots", dict(default=os.environ.get("TINYATTN_PLOTS"), help="folder for the figures")),
             *arguments]
    parser = argparse.ArgumentParser(description=description)
    for flag, settings in every:
        parser.add_argument(flag, **settings)
    args, unknown = parser.parse_known_args()
    if unknown and not in_notebook():
        _refuse_unknown(parser, unknown, [flag for flag, _ in every])
    if args.seed < 0:
        parser.error(f"--seed {args.seed}: a seed is 0 or more")
    plots = _plots()
    runs = os.path.join(plots, "runs")
    args.plots = args.plots or (plots if args.gallery else os.path.join(runs, "quick") if args.quick else runs)
    _writable_folder(parser, args.plots)
    manual_seed(args.seed)
    # Draw the CPU generator now, before the first line a run prints: it imports NumPy's random module, whose
    # Cython start-up swallows a KeyboardInterrupt raised during it, so a Ctrl-C just after that line was lost.
    generator("cpu")
    if sys.excepthook is sys.__excepthook__:     # a hook of one's own (a notebook kernel's, a debugger's) is kept
        sys.excepthook = _ctrl_c_in_one_line
    repository_on_path()
    cpu.tune_allocator()          # a lesson is a whole program: let glibc keep freed memory (tinyattn/cpu/tuning.py)
    described = environment.describe()
    # A page of the course site names no folder of the machine that built it.
    where = "the repository's tinyattn/" if static_page() else PACKAGE
    print(environment.line(described) + f" · seed {args.seed}" + (" · quick" if args.quick else "") +
          f" · imported from {where}", flush=True)
    mismatch = another_clone(sys.argv[0])
    if mismatch:
        print(mismatch, flush=True)
    note = environment.blas_note(described)
    if note:
        print(note, flush=True)
    return args


def stop_interrupted():
    """Where Ctrl-C ends a run: one line on stderr, not a traceback, and exit code 130 (128 + SIGINT, what a shell
    reports for a program Ctrl-C ended)."""
    print("\ninterrupted (Ctrl-C): the run stopped there", file=sys.stderr)
    sys.exit(130)


def _ctrl_c_in_one_line(kind, value, traceback):
    """sys.excepthook of a lesson run as a script (python lessons/NN_*.py): Ctrl-C that nothing caught ends the run
    as stop_interrupted says; any other error keeps its traceback."""
    if issubclass(kind, KeyboardInterrupt):
        stop_interrupted()
    sys.__excepthook__(kind, value, traceback)


def _writable_folder(parser, folder):
    """Make the figures' folder, or stop with one line (exit 2) before anything trains when it cannot be written."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        parser.error(f"the figures' folder {folder} cannot be written: {error.strerror or error} (--plots DIR "
                     f"names another)")


def repository_on_path():
    """In a clone, put its root on sys.path, so that `from lessons.exercises...` imports as from the root wherever
    the lesson, or an exercise's notebook, runs. Returns whether there is one."""
    if os.path.isdir(LESSONS) and ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return os.path.isdir(LESSONS)


def another_clone(script):
    """A warning when script (a lesson, the exercise checker) lies in lessons/ of another repository than the one
    tinyattn was imported from, else None: with an editable install of one clone, a second clone's lessons would
    run on the first clone's code without a word."""
    folder = os.path.dirname(os.path.realpath(script)) if script else ""
    if os.path.basename(folder) != "lessons" or os.path.dirname(folder) == os.path.realpath(ROOT):
        return None
    repository = os.path.dirname(folder)
    return (f"warning: tinyattn is imported from {PACKAGE}, not from {repository}, the repository of "
            f"{os.path.basename(script)} (an editable install of another clone?); run it with PYTHONPATH={repository} "
            f"or pip install -e {repository}")


def _refuse_unknown(parser, unknown, flags):
    """Stop with one line naming the first argument that is none of flags (and the flag it resembles): a misspelt
    --quick must not run the full lesson. Exit code 2, as argparse's own errors."""
    near = difflib.get_close_matches(unknown[0].split("=")[0], flags, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    kind = "option" if unknown[0].startswith("-") else "argument"
    parser.exit(2, f"{parser.prog}: unknown {kind} {unknown[0]}; {hint}the options are {', '.join(flags)} "
                   f"(--help says what they do)\n")


def plot_path(args, name):
    return os.path.join(args.plots, name)


def progress(iterable, **kwargs):
    """A tqdm progress bar: the notebook widget in Jupyter, else text on stderr (so printed results stay readable)
    redrawn at most twice a second, postfix updates included; none on a static page (the course site), where a bar
    would be a widget no kernel drives, or a trail of redrawn lines."""
    from tqdm.auto import tqdm

    class Progress(tqdm):
        def set_postfix(self, ordered_dict=None, refresh=False, **kwargs):
            super().set_postfix(ordered_dict, refresh=refresh, **kwargs)
    return Progress(iterable, file=sys.stderr, dynamic_ncols=True, mininterval=0.5, disable=static_page(), **kwargs)


def expect_speedup(what, measured, expected):
    """A timing claim is printed, never asserted: a busy machine can miss it. Prints a warning when the measured
    speed-up (how many times faster) falls below what the lesson expects; returns whether it held."""
    held = measured >= expected
    if not held:
        print(f"warning: {what} measured {measured:.2f}x faster, below the {expected:g}x this lesson expects. Timings "
              "depend on the machine and on what else runs on it; run the lesson again on an idle machine.", flush=True)
    return held


def quick_note(args):
    """What a lesson prints beside its accuracies and losses: on a quick run, that it is too small to learn (its
    numbers say only that the code runs); nothing on a real run."""
    return "   (a quick run: too small to learn; run without --quick for the lesson's numbers)" if args.quick else ""


def report(**metrics):
    """Print the lesson's closing line, RESULT {json} with every measured number, for the tests and scripts that read
    a run. A notebook shows neither the line nor the numbers again: its reader has seen them where the lesson
    printed them."""
    if not in_notebook():
        print("RESULT " + json.dumps({k: (float(f"{v:.4g}") if isinstance(v, float) else v)
                                      for k, v in metrics.items()}), flush=True)


def from_pretrained(weights, *classes):
    """Each class's from_pretrained(weights) (a model, its tokenizer, its image processor), for a lesson to call
    before it trains anything: a folder or hub name that cannot be read (a missing or damaged file, a setting or
    tensor the model cannot take) stops the run at once, in one line."""
    try:
        return [cls.from_pretrained(weights) for cls in classes]
    except (PretrainedError, CheckpointError) as error:
        raise SystemExit(f"--weights {weights}: {error}") from None
