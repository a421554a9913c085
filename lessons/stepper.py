"""Stepping through a lesson in a terminal: `python -m lessons 02 --step`.

Each step is one code cell with the markdown before it, shown as "cell k/n". At the prompt: Enter runs the cell and
moves on, b goes back, r runs again the cell the prompt names (the one just run; after b or g, the cell on screen
once it has run), g N goes to cell N (and offers to run the earlier cells that have not run, whose names later cells
may need), l lists the cells and marks those that ran, i opens a Python prompt in the lesson's namespace (leave it
with Ctrl-D to step on), q quits. An exception or Ctrl-C inside a cell prints its traceback, with the lesson's own
file and line, and comes back to the prompt. Figures the cells write are announced by path and, where there is a
display, shown in a window. Without a terminal on stdin (a pipe, a test), every cell runs in turn, Ctrl-C stops the
run (exit 130), and the exit code is 1 when a cell stopped with an error.
"""
import code
import os
import sys
import traceback

from lessons.cells import read_cells


def _help(index, again):
    """The prompt's line of commands; again is the cell r reruns (None: none yet)."""
    rerun = f"r rerun {again + 1}" if again is not None else "r rerun: none"
    return f"[Enter] run {index + 1} · b back · {rerun} · g N go to · l list · i python · q quit"


def _show(step, index, total):
    print(f"\n===== cell {index + 1}/{total} " + "=" * 48)
    if step.markdown:
        print(step.markdown.rstrip())
        print("-" * 62)
    print(step.code.rstrip())
    print("=" * 62, flush=True)


def _run(step, path, namespace, interactive=True):
    """Run one cell's code so that tracebacks name the lesson file and its real lines; True if it finished. Ctrl-C
    comes back to the prompt; without one (not interactive) it stops the run."""
    padded = "\n" * (step.code_line - 1) + step.code       # line numbers as in the file
    try:
        exec(compile(padded, path, "exec"), namespace)
        return True
    except KeyboardInterrupt:
        if not interactive:
            raise
        print("\n(interrupted)", file=sys.stderr)
    except SystemExit:
        raise
    except BaseException:
        frames = traceback.format_exc().splitlines()
        # drop the stepper's own frames: start at the lesson's
        start = next((i for i, text in enumerate(frames) if path in text), 1)
        print("\n".join(frames[:1] + frames[start:]), file=sys.stderr)
    print("the cell stopped; fix what it says, then r to run it again", file=sys.stderr, flush=True)
    return False


def _read_line(prompt):
    """input(), except that open figure windows keep answering (their sliders move) while the prompt waits."""
    import matplotlib.pyplot as plt
    if os.environ.get("TINYATTN_SHOW_FIGURES") != "1" or not plt.get_fignums() or os.name != "posix":
        return input(prompt)
    import select
    print(prompt, end="", flush=True)
    while not select.select([sys.stdin], [], [], 0)[0]:
        plt.gcf().canvas.start_event_loop(0.05)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


def _ask(prompt):
    try:
        return _read_line(prompt + " > ").strip()
    except EOFError:
        return "q"
    except KeyboardInterrupt:
        print()
        return "q"


def _listing(steps, index, ran, failed):
    print("  (> on screen · + ran · x stopped with an error)")
    for i, step in enumerate(steps):
        mark = "+" if i in ran else "x" if i in failed else " "
        print(f"{'>' if i == index else ' '}{mark} {i + 1:2d}  {step.title()}")


def step_through(path, argv):
    """Step through the lesson at path (its command line argv); returns the exit code: 1 when, without a terminal,
    a cell stopped with an error, else 0."""
    steps = read_cells(path)
    sys.argv = [path] + argv
    namespace = {"__name__": "__main__", "__file__": path}
    os.environ.setdefault("TINYATTN_SHOW_FIGURES", "1" if _has_display() else "0")
    interactive = sys.stdin.isatty()
    index, again = 0, None               # again: the cell r reruns
    ran, failed = set(), set()           # cells whose last run finished, or stopped with an error

    def run(i):
        finished = _run(steps[i], path, namespace, interactive)
        (ran if finished else failed).add(i)
        (failed if finished else ran).discard(i)
        return finished

    while index < len(steps):
        _show(steps[index], index, len(steps))
        if not interactive:
            run(index)
            index += 1
            if index == len(steps) and failed:
                print(f"cell{'s' * (len(failed) > 1)} {', '.join(str(i + 1) for i in sorted(failed))} stopped with "
                      f"an error", file=sys.stderr)
                return 1
            continue
        command = _ask(_help(index, again))
        if command == "":
            again = index
            index += 1 if run(index) else 0
        elif command == "q":
            return 0
        elif command == "b":
            index = max(0, index - 1)
            again = index if index in ran | failed else None
        elif command == "r" and again is not None:
            index = again
            if run(index):
                index += 1
        elif command.startswith("g") and command[1:].strip().isdigit():
            index = min(max(0, int(command[1:]) - 1), len(steps) - 1)
            missing = [i for i in range(index) if i not in ran]
            if missing:
                index = _offer_earlier(missing, index, run)
            again = index if index in ran | failed else None
        elif command == "l":
            _listing(steps, index, ran, failed)
        elif command == "i":
            code.interact(banner="Python in the lesson's namespace; Ctrl-D returns to stepping", local=namespace,
                          exitmsg="")
        else:
            print(_help(index, again))
    if interactive:
        print("\nend of the lesson")
    return 0


def _offer_earlier(missing, index, run):
    """Going to cell index + 1 with earlier cells not run: say which, and run them in order if asked (stopping at the
    first that fails, which is then on screen). Returns the cell to show."""
    cells = ("cells " if len(missing) > 1 else "cell ") + ", ".join(str(i + 1) for i in missing)
    print(f"{cells} before cell {index + 1} {'have' if len(missing) > 1 else 'has'} not run: a name "
          f"{'they define' if len(missing) > 1 else 'it defines'} is missing until then")
    if _ask(f"run {cells} now? [y/N]").lower() not in ("y", "yes"):
        return index
    for i in missing:
        print(f"----- running cell {i + 1}", flush=True)
        if not run(i):
            return i
    return index


def _has_display():
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform in ("darwin", "win32")
