"""python -m lessons             list the lessons
python -m lessons 02          run lesson 02 (any extra flags, such as --quick, pass through)
python -m lessons 02 --step   run it cell by cell, pausing after each (Enter: next cell, q: quit)
python -m lessons exercises   list the exercises (lessons/exercises/) and how far each one is
python -m lessons check NAME  grade one against the reference path (--file PATH, --solution): lessons/checker.py"""
import glob
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # lessons import their shared helpers as `common`, as when run as scripts


def lesson_files():
    return sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.py")))


def title(path):
    """The first markdown line of a lesson, without its '#' marks."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = line.strip().lstrip("#").strip()
            if line.startswith("# ") and text and not text.startswith("%%"):
                return text
    return os.path.basename(path)


def cells(path):
    """(kind, source) for each '# %%' cell: kind is 'markdown' or 'code'."""
    out, kind, lines = [], "code", []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# %%"):
                if any(l.strip() for l in lines):
                    out.append((kind, "".join(lines)))
                kind, lines = ("markdown" if "[markdown]" in line else "code"), []
            else:
                lines.append(line)
    if any(l.strip() for l in lines):
        out.append((kind, "".join(lines)))
    return out


def step_through(path, argv):
    sys.argv = [path] + argv
    namespace = {"__name__": "__main__", "__file__": path}
    for i, (kind, source) in enumerate(cells(path)):
        if kind == "markdown":
            print("\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in source.splitlines()))
        else:
            print(f"\n----- cell {i} " + "-" * 50 + "\n" + source.rstrip() + "\n" + "-" * 62)
            exec(compile(source, f"{path}:cell{i}", "exec"), namespace)
        if sys.stdin.isatty() and input("[Enter] next cell, q quit > ").strip().lower() == "q":
            break


def main(argv):
    if argv[:1] in (["exercises"], ["check"]):
        from lessons import checker
        sys.exit(checker.main(argv))
    files = lesson_files()
    if not argv:
        for path in files:
            print(f"{os.path.basename(path)[:2]}  {title(path)}")
        print("\nrun one: python -m lessons NN [--quick] [--step]")
        return
    number, rest = argv[0], argv[1:]
    matches = [p for p in files if os.path.basename(p).startswith(number.zfill(2))]
    if not matches:
        sys.exit(f"no lesson {number!r}; python -m lessons lists them")
    if "--step" in rest:
        step_through(matches[0], [a for a in rest if a != "--step"])
    else:
        sys.argv = [matches[0]] + rest
        runpy.run_path(matches[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
