"""The exercises' grader: lessons/exercises/NAME.py against the library's reference path. This file is its command
face; its parts are in lessons/checking/.

    python -m lessons exercises                               list them, with how many TODOs each has left
    python -m lessons check NAME [--file PATH] [--solution]   grade lessons/exercises/NAME.py, or the copy at PATH,
                                                              or the bundled solution (lessons/exercises/solutions/)
    python -m lessons check all [--dir DIR] [--json]          grade every exercise (in DIR), every step of each:
                                                              a summary table, or JSON for a grade book
    (--timeout SECONDS: how long each submission may compute; lessons/checking/runner.py runs it apart, inside the
    operating system's sandbox where bubblewrap runs (lessons/checking/sandbox.py); --require-sandbox: only there)

A check runs in steps and stops at the first that fails, saying why: an exception in your code with the line it
came from, gradcheck's message, or where your numbers leave the reference path's. A failing step still runs all its
cases, and gives a verdict on every output and gradient, right or wrong, with what the pattern points at and the
common mistake your numbers equal, where one does (lessons/mistakes.py). The steps are a float64 gradcheck, a
comparison with the reference path (`with ta.reference():`) on several shapes (masks, ragged lengths, broadcasting
where they apply), float32 staying float32, and, where a model can run on your Function, a short training run with
`F.use(...)` that must reach the loss the reference path reaches. Exit code 0 only on a pass.
"""
import argparse
import contextlib
import inspect
import json
import os
import pathlib
import sys

import tinyattn as ta
from lessons.checking import runner, sandbox
from lessons.checking.learners_file import (EXERCISES, Refused, add_learner_file, borrowed, shown as _shown,
                                            todos_left)
from lessons.checking.learners_file import learners_or_bundled  # noqa: F401  (checker.learners_or_bundled stands)
from lessons.checking.registry import registered as _exercises
from lessons.checking.steps import Failed, Run, indented, step
from lessons.checking.submission import Submission
from lessons.notebook import exercise_notebook, notebook_path, write_notebook
from tinyattn import lesson


# -- the commands --------------------------------------------------------------------------------------------------
def list_exercises():
    print(f"{'exercise':22}{'lesson':8}{'status':22}what")
    for item in _exercises.values():
        path = EXERCISES / f"{item.name}.py"
        left = todos_left(path) if path.exists() else None
        status = ("file missing" if left is None else f"{left} TODO{'s' * (left != 1)} left" if left else
                  "written: check it")
        print(f"{item.name:22}{item.lesson:8}{status:22}{item.title}")
    answer = ", --solution for the answer" if (EXERCISES / "solutions").is_dir() else ""
    print(f"\ngrade one: python -m lessons check NAME   (--file PATH for another copy{answer})"
          "\ngrade all: python -m lessons check all    (--dir DIR for a student's folder, --json for a grade book)")
    return 0


def check(name, path, keep_going=False, text=None, timeout=runner.TIMEOUT):
    """Grade the file at path (a .py file or a notebook) as exercise name, run in a child process of its own with a
    time limit of timeout seconds (lessons/checking/runner.py). text: the file's bytes, read before any child
    started (or the OSError reading it raised); None reads them now. A learner's check stops at the first step that
    fails; keep_going (a grade) runs every step. Returns the result: passed, each step's verdict, and the score, the
    share of the exercise's steps passed (loading the file earns nothing)."""
    item, learner = _exercises[name], None
    text = read_submission(path) if text is None else text

    def submission():
        nonlocal learner
        if isinstance(text, OSError):
            raise text
        learner = runner.Learner(path.name, text, item.given, item.twins, path.resolve().is_relative_to(
            EXERCISES / "solutions"), keep_going, timeout)
        namespace, why = learner.names()
        return Submission(namespace, why.get)

    def finish():
        return (learner.output(), learner.refused) if learner else ([], None)
    return _grade(name, _shown(path), submission, keep_going, finish)


def read_submission(path):
    """The bytes of the file at path, or the OSError reading it raised (graded as a file that does not load)."""
    try:
        return path.read_bytes()
    except OSError as error:
        return error


def check_notebook(name, namespace):
    """Grade exercise name on a notebook's own code, from its last cell: check_notebook("attention", globals()). The
    same steps as `python -m lessons check NAME`, but in the notebook's own process (its code is already running
    there); an error in the learner's code names its cell's line."""
    say_where_tinyattn_is()
    for value in namespace.values():
        for function in _functions_of(value):
            add_learner_file(function.__code__.co_filename)
    given = _exercises[name].given
    _grade(name, "this notebook's code",
           lambda: Submission(namespace, lambda n: borrowed(n, namespace[n], given)))


def _functions_of(value):
    """The functions a notebook's name holds: itself, or a class's forward and backward, where they are code."""
    candidates = [value] if inspect.isfunction(value) else \
        [getattr(value, m, None) for m in ("forward", "backward")] if inspect.isclass(value) else []
    return [f for f in candidates if inspect.isfunction(f)]


def _grade(name, shown, submission, keep_going=False, finish=lambda: ([], None)):
    """check's steps, on the Submission that submission() gives (a child's stand-ins, a notebook's names); finish()
    ends the submission's run: what it printed, and why it was refused while it ran (None: it was not)."""
    item = _exercises[name]
    print(f"exercise {name} (lesson {item.lesson}): {item.title}\ngrading {shown}")
    Run.keep_going, Run.steps = keep_going, []
    learner, result = None, {"exercise": name, "lesson": item.lesson, "file": shown, "passed": False}
    refused = []
    try:
        with step("your file loads"):
            learner = submission()
        Run.steps = []
        item.check(learner or Submission({}, absent="your file did not load (step 'your file loads')"))
        result["passed"] = learner is not None and not learner._refused and all(ok for _, ok in Run.steps)
    except Refused as error:
        print(f"  FAIL  your own work\n{indented(str(error))}")
        refused.append(str(error))
    except Failed:
        pass
    output, refused_while_running = finish()
    if learner is not None:
        refused += learner._refused
    if refused_while_running and refused_while_running not in refused:
        print(f"  FAIL  your own work\n{indented(refused_while_running)}")
        refused.append(refused_while_running)
    if refused:
        result.update(passed=False, refused=refused)
    if output:
        print("  your code printed:\n" + "\n".join(f"    | {line}" for line in output))
    passed = sum(ok for _, ok in Run.steps)
    result.update(steps_passed=passed, steps_total=len(Run.steps),
                  score=round(passed / len(Run.steps), 4) if Run.steps else 0.0,
                  steps=[{"step": description, "passed": ok} for description, ok in Run.steps])
    verdict = "PASSED every step" if result["passed"] else "REFUSED" if "refused" in result else "FAILED"
    print(f"{name}: {verdict}." + ("" if result["passed"] or keep_going else
                                  " Fix what the message points at, then run the check again."))
    return result


def summary(results):
    """The table of a grade: each exercise's steps passed and result, then the totals."""
    print(f"\n{'exercise':22}{'lesson':8}{'steps':8}{'score':8}result")
    for r in results:
        result = "passed" if r["passed"] else "refused" if "refused" in r else "failed"
        print(f"{r['exercise']:22}{r['lesson']:8}{r['steps_passed']}/{r['steps_total']:<6}{r['score']:<8.2f}{result}")
    passed = sum(r["passed"] for r in results)
    print(f"{passed} of {len(results)} exercises passed; score {_score(results):.2f} (the mean of the exercises' "
          "scores, each the share of its steps passed)")


def _score(results):
    return round(sum(r["score"] for r in results) / len(results), 4)


def say_where_tinyattn_is():
    """The first line: the folder tinyattn was imported from, and a warning when it is not this repository's."""
    print(f"tinyattn {ta.__version__} imported from {lesson.PACKAGE}")
    warning = lesson.another_clone(__file__)
    if warning:
        print(warning)


def write_notebooks(argv):
    """`exercises --notebook [--out DIR] [NAME ...]`: each exercise (or those named) as NAME.ipynb in DIR."""
    parser = argparse.ArgumentParser(prog="python -m lessons exercises --notebook",
                                     description="write exercises as notebooks, graded by their last cell")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"some of {', '.join(_exercises)} (default: all)")
    parser.add_argument("--out", help="the folder to write them to (default: the current folder)")
    parser.add_argument("--force", action="store_true", help="overwrite notebooks already there (worked ones too)")
    args = parser.parse_args([a for a in argv if a != "--notebook"])
    unknown = [name for name in args.names if name not in _exercises]
    if unknown:
        parser.error(f"no exercise {unknown[0]!r}; the exercises are {', '.join(_exercises)}")
    names = args.names or list(_exercises)
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out} is a file: name a folder to write the notebooks into")
    there = [path for path in (notebook_path(EXERCISES / f"{name}.py", args.out) for name in names)
             if os.path.exists(path)]
    if there and not args.force:
        parser.exit(1, f"not written: {', '.join(there)} exist{'s' * (len(there) == 1)} (worked notebooks?) and "
                       f"{'are' if len(there) > 1 else 'is'} kept; --force overwrites, --out DIR writes elsewhere\n")
    for name in names:
        print(f"wrote {write_notebook(EXERCISES / f'{name}.py', args.out, exercise_notebook, force=True)}")
    print(f"open one in Jupyter, fill in its TODOs and run its last cell; or grade it with "
          f"python -m lessons check NAME --file NAME.ipynb")
    return 0


def _submitted(folder, name):
    """folder/NAME.py, or the notebook folder/NAME.ipynb when only it is there."""
    notebook = folder / f"{name}.ipynb"
    return notebook if notebook.exists() and not (folder / f"{name}.py").exists() else folder / f"{name}.py"


def main(argv):
    """`exercises [--notebook ...]`, or `check NAME|all [--file PATH | --solution | --dir DIR] [--json]`; returns
    the exit code."""
    if argv[:1] == ["exercises"]:
        say_where_tinyattn_is()
        return write_notebooks(argv[1:]) if "--notebook" in argv else list_exercises()
    parser = argparse.ArgumentParser(prog="python -m lessons check", description="grade an exercise, or all of them")
    parser.add_argument("name", choices=sorted(_exercises) + ["all"], metavar="NAME",
                        help=f"one of {', '.join(_exercises)}; or all")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--file", type=pathlib.Path, help="grade this copy instead of lessons/exercises/NAME.py")
    where.add_argument("--dir", type=pathlib.Path, help="grade DIR/NAME.py, or DIR/NAME.ipynb (a student's folder)")
    where.add_argument("--solution", action="store_true", help="grade the bundled solution")
    parser.add_argument("--json", action="store_true", help="every step runs; the results go to stdout as JSON (for "
                                                            "a grade book), the steps to stderr")
    parser.add_argument("--timeout", type=float, default=runner.TIMEOUT, metavar="SECONDS",
                        help=f"how long each submission may compute, in all (default {runner.TIMEOUT:g})")
    parser.add_argument("--require-sandbox", action="store_true",
                        help="grade only inside the operating system's sandbox (bubblewrap): for an instructor's CI")
    args = parser.parse_args(argv[1:])
    not_isolated = sandbox.unavailable()
    if not_isolated and args.require_sandbox:
        parser.exit(2, f"--require-sandbox: not graded, the sandbox cannot run here ({not_isolated}); "
                       f"{sandbox.HOW_TO_GET}\n")
    if args.file and (args.file.is_dir() or args.file.suffix not in (".py", ".ipynb")):
        parser.error(f"--file {args.file}: not a .py file or a notebook (.ipynb)")
    if args.timeout <= 0:
        parser.error(f"--timeout {args.timeout:g}: must be more than 0 seconds")
    if args.dir and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: no such folder")
    if args.solution and not (EXERCISES / "solutions").is_dir():
        parser.error("--solution: this copy has no lessons/exercises/solutions/ (a student copy)")
    names = list(_exercises) if args.name == "all" else [args.name]
    if args.file and len(names) > 1:
        parser.error("--file grades one exercise: name it, or give a folder with --dir")
    folder = args.dir or EXERCISES / ("solutions" if args.solution else "")
    paths = {name: args.file or _submitted(folder, name) for name in names}
    texts = {name: read_submission(path) for name, path in paths.items()}      # all of them before any runs
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        say_where_tinyattn_is()
        if not_isolated:
            print(sandbox.not_isolated(not_isolated))
        results = [check(name, paths[name], args.json or len(names) > 1, texts[name], args.timeout)
                   for name in names]
        if len(names) > 1:
            summary(results)
    if args.json:
        print(json.dumps({"tinyattn": lesson.PACKAGE, "passed": sum(r["passed"] for r in results),
                          "exercises_total": len(results), "score": _score(results), "exercises": results}, indent=1))
    return 0 if all(r["passed"] for r in results) else 1
