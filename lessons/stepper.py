"""Stepping through a lesson in a terminal: `python -m lessons 02 --step`.

Each step is one code cell with the markdown before it, shown as "cell k/n". At the prompt: Enter runs the cell and
moves on, b goes back, r runs the last cell again, g N goes to cell N, l lists the cells, i opens a Python prompt in
the lesson's namespace (leave it with Ctrl-D to step on), q quits. An exception or Ctrl-C inside a cell prints its
traceback, with the lesson's own file and line, and comes back to the prompt. Figures the cells write are announced
by path and, where there is a display, shown in a window. Without a terminal on stdin (a pipe, a test), every cell
runs in turn.
"""
import code
import os
import sys
import traceback

from lessons.cells import read_cells

HELP = "[Enter] run · b back · r rerun · g N go to · l list · i python · q quit"


def _show(step, index, total):
    print(f"\n===== cell {index + 1}/{total} " + "=" * 48)
    if step.markdown:
        print(step.markdown.rstrip())
        print("-" * 62)
    print(step.code.rstrip())
    print("=" * 62, flush=True)


def _run(step, path, namespace):
    """Run one cell's code so that tracebacks name the lesson file and its real lines; True if it finished."""
    padded = "\n" * (step.code_line - 1) + step.code       # line numbers as in the file
    try:
        exec(compile(padded, path, "exec"), namespace)
        return True
    except KeyboardInterrupt:
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


def _ask():
    try:
        return _read_line(HELP + " > ").strip()
    except EOFError:
        return "q"
    except KeyboardInterrupt:
        print()
        return "q"


def step_through(path, argv):
    steps = read_cells(path)
    sys.argv = [path] + argv
    namespace = {"__name__": "__main__", "__file__": path}
    os.environ.setdefault("TINYATTN_SHOW_FIGURES", "1" if _has_display() else "0")
    interactive = sys.stdin.isatty()
    index, last = 0, None
    while index < len(steps):
        _show(steps[index], index, len(steps))
        if not interactive:
            _run(steps[index], path, namespace)
            index += 1
            continue
        command = _ask()
        if command == "":
            last = index
            index += 1 if _run(steps[index], path, namespace) else 0
        elif command == "q":
            return
        elif command == "b":
            index = max(0, index - 1)
        elif command == "r" and last is not None:
            index = last
            if _run(steps[index], path, namespace):
                index += 1
        elif command.startswith("g") and command[1:].strip().isdigit():
            index = min(max(0, int(command[1:]) - 1), len(steps) - 1)
        elif command == "l":
            for i, step in enumerate(steps):
                print(f"{'>' if i == index else ' '} {i + 1:2d}  {step.title()}")
        elif command == "i":
            code.interact(banner="Python in the lesson's namespace; Ctrl-D returns to stepping", local=namespace,
                          exitmsg="")
        else:
            print(HELP)
    if interactive:
        print("\nend of the lesson")


def _has_display():
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform in ("darwin", "win32")
