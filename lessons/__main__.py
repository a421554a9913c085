"""python -m lessons                            list the lessons
python -m lessons 02                         run lesson 02 (flags such as --quick or --seed 3 pass through)
python -m lessons 02 --step                  step through it cell by cell (--step --help says how)
python -m lessons 02 --notebook [--out DIR]  write it as a Jupyter notebook (.ipynb) that runs wherever it is saved
                                             (one already there is kept; --force overwrites it)
python -m lessons exercises                  list the exercises (lessons/exercises/) and how far each one is
python -m lessons exercises --notebook       write them as notebooks graded by their last cell ([--out DIR] [NAME])
python -m lessons check NAME                 grade one against the reference path (--file PATH, --solution)
python -m lessons check all [--dir DIR]      grade every exercise: a summary table (--json: for a grade book)
python -m lessons student-copy DIR           write the repository without the exercises' solutions (for a class)
python -m lessons flash                      walk flash attention's loop tile by tile (Enter: next; --help)

Run these from the repository root."""
import glob
import os
import re
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# A lesson written after the course was numbered keeps its number and is read after the lesson named here: 21 (GPT-2's
# tokenizer) right after 06 (the GPT it feeds).
READ_AFTER = {"21": "06"}


def lesson_files():
    """The lessons in reading order: by number, except that each lesson of READ_AFTER follows its lesson."""
    files = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.py")))
    order = [path for path in files if os.path.basename(path)[:2] not in READ_AFTER]
    for path in reversed(files):                     # reversed: two lessons placed after one keep their numbers' order
        after = READ_AFTER.get(os.path.basename(path)[:2])
        if after is not None:
            place = next(i for i, p in enumerate(order) if os.path.basename(p).startswith(after))
            order.insert(place + 1, path)
    return order


def title(path):
    """The lesson's first markdown line, without its '#' marks or its number ("Seq2Seq and its bottleneck, ...")."""
    from lessons.cells import raw_cells
    for kind, text, _ in raw_cells(path):
        if kind == "markdown":
            return re.sub(r"^[#\s]*(\d+\s*·\s*)?", "", text.strip().splitlines()[0])
    return os.path.basename(path)


def usage_error(message):
    """A command line the lessons cannot run: one line on stderr, exit code 2 (as argparse's errors)."""
    print(f"usage: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if argv[:1] in (["exercises"], ["check"]):
        from lessons import checker
        sys.exit(checker.main(argv))
    if argv[:1] == ["student-copy"]:
        from lessons import student_copy
        sys.exit(student_copy.main(argv[1:]))
    if argv[:1] == ["flash"]:
        from lessons import flash_walk
        sys.exit(flash_walk.main(argv[1:]))
    files = lesson_files()
    if not argv or argv[0] in ("-h", "--help"):
        for path in files:
            print(f"{os.path.basename(path)[:2]}  {title(path)}")
        print("\n" + __doc__)
        return
    number, rest = argv[0], argv[1:]
    matches = [p for p in files if os.path.basename(p).startswith(number.zfill(2))]
    if not matches:
        sys.exit(f"no lesson {number!r}; python -m lessons lists them")
    if "--notebook" in rest:
        from lessons.notebook import write_notebook
        out = None
        if "--out" in rest:
            out = (rest[rest.index("--out") + 1:] or [""])[0]
            if not out or out.startswith("-"):
                usage_error(f"python -m lessons {number} --notebook [--out DIR] [--force]: --out needs the folder to "
                            "write to")
        try:
            print(f"wrote {write_notebook(matches[0], out, force='--force' in rest)}")
        except OSError as error:
            sys.exit(f"not written: {error}")
        return
    try:
        if "--step" in rest:
            from lessons import stepper
            if "--help" in rest or "-h" in rest:
                print(stepper.__doc__)
                return
            sys.exit(stepper.step_through(matches[0], [a for a in rest if a != "--step"]))
        sys.argv = [matches[0]] + rest
        runpy.run_path(matches[0], run_name="__main__")
    except KeyboardInterrupt:
        from tinyattn.lesson import stop_interrupted
        stop_interrupted()


if __name__ == "__main__":
    main(sys.argv[1:])
