"""A student's copy of the repository: `python -m lessons student-copy DIR`.

It writes the repository's files (those git tracks) into DIR, a new folder outside the repository, without the
exercises' solutions (lessons/exercises/solutions/) and without the exercises' guide's part for
instructors, and with no git history (the solutions are in it). Everything a student runs works there: the lessons (lesson 06 trains on the
student's attention once it is written, on the library's until then), the exercises, their notebooks and their
checker, and the test suite (whose tests of the solutions and of the untouched stubs skip: lessons/exercises/ holds
the student's work).
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess

from lessons.checking.learners_file import EXERCISES, todos_left

ROOT = EXERCISES.parents[1]
SOLUTIONS = "lessons/exercises/solutions/"
SKIPPED_FOLDERS = {".git", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}


def repository_files(root):
    """The repository's files, relative to root: those git tracks in a clone (not a folder of answers someone left
    in the checkout); else every file but caches, build outputs and lesson runs' figures."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "-z"], cwd=root,
                                capture_output=True, check=True).stdout.decode().split("\0")
        return sorted(path for path in listed if path and (root / path).is_file())
    except (OSError, subprocess.CalledProcessError):
        return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()
                      and not SKIPPED_FOLDERS & set(path.relative_to(root).parts[:-1])
                      and not path.name.endswith(".egg-info") and "plots/runs" not in path.as_posix())


GUIDE = "lessons/exercises/README.md"           # the exercises' guide, whose part for instructors stays behind


def without_instructors(guide):
    """The exercises' guide without its "## For instructors" part (up to the next heading of its level or above)."""
    return re.sub(r"^## For instructors\n.*?(?=^#{1,2} |\Z)", "", guide, flags=re.S | re.M)


def write(target, root=ROOT):
    """Write the student copy of the repository at root into target (absent or empty); returns the files written.
    Refuses a repository whose exercises are solved (a stub with no TODO left would hand out its answer)."""
    exercises = root / "lessons" / "exercises"
    solved = [path.name for path in sorted(exercises.glob("*.py"))
              if path.name not in ("__init__.py", "given.py") and todos_left(path) == 0]
    if solved:
        raise ValueError(f"{', '.join(solved)} in {exercises} have no TODO left: a student copy would hand out those "
                         "answers; restore the stubs first (git checkout lessons/exercises/)")
    if target.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"{target} is inside the repository {root}: next year's copy would carry this one")
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target} is a file: a student copy goes into a new folder")
    if target.exists() and any(target.iterdir()):
        raise ValueError(f"{target} is not empty: a student copy goes into a new folder")
    written = [path for path in repository_files(root) if not path.startswith(SOLUTIONS)]
    for path in written:
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        if path == GUIDE:
            (target / path).write_text(without_instructors((root / path).read_text(encoding="utf-8")),
                                       encoding="utf-8")
        else:
            shutil.copy2(root / path, target / path)
    return written


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m lessons student-copy",
                                     description="write the repository without the exercises' solutions into DIR")
    parser.add_argument("dir", type=pathlib.Path, metavar="DIR", help="a new (or empty) folder")
    args = parser.parse_args(argv)
    try:
        written = write(args.dir.resolve())
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    except OSError as error:                            # a folder without write permission, a full disk
        parser.exit(1, f"{parser.prog}: cannot write the copy into {args.dir}: {error.strerror or error}"
                       f"{f' ({error.filename})' if error.filename else ''}\n")
    print(f"wrote {len(written)} files into {args.dir}, without {SOLUTIONS} and the guide's part for instructors.\n"
          f"A student starts there with: cd {args.dir} && pip install -e . (or PYTHONPATH={os.path.abspath(args.dir)})"
          f" && python -m lessons exercises")
    return 0
