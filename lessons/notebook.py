"""A lesson as a Jupyter notebook: `python -m lessons 02 --notebook [--out DIR]` writes 02_dates_attention.ipynb.

Markdown cells stay markdown, code cells stay code, in the file's order. The notebook imports everything from the
installed tinyattn package, so it runs wherever it is saved; TINYATTN_QUICK=1 in the kernel's environment runs the
lesson's --quick configuration. Figures show inline and are still written under plots/.

An exercise as a notebook: `python -m lessons exercises --notebook [--out DIR] [NAME ...]` writes NAME.ipynb, the
exercise's statement, its code to fill in (from lessons/exercises/NAME.py as it is now) and a last cell that grades
the notebook's own code with the checker; `python -m lessons check NAME --file NAME.ipynb` grades it the same way.
"""
import ast
import json
import os

from lessons.cells import raw_cells


def _source(text):
    lines = text.rstrip("\n").split("\n")
    return [line + "\n" for line in lines[:-1]] + lines[-1:]


def notebook(path):
    """The notebook (a dict in nbformat 4.5) of a lesson file."""
    return _notebook([(kind, text, {}) for kind, text, _ in raw_cells(path)])


def _notebook(cells):
    """The notebook of cells, each (kind, text, metadata)."""
    made = []
    for i, (kind, text, metadata) in enumerate(cells):
        cell = {"cell_type": kind, "id": f"cell-{i}", "metadata": metadata, "source": _source(text)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        made.append(cell)
    return {"cells": made, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}}}


def notebook_path(path, out_dir=None):
    """Where write_notebook writes the notebook of path: out_dir (default: the current folder)/NAME.ipynb."""
    return os.path.join(out_dir or os.getcwd(), os.path.splitext(os.path.basename(path))[0] + ".ipynb")


def write_notebook(path, out_dir=None, build=notebook, force=False):
    """Write build(path), the notebook of a lesson (or of an exercise: exercise_notebook), into out_dir (default: the
    current folder), named after path; returns its path. A notebook already there (a learner's worked one) is kept:
    FileExistsError, unless force. out_dir naming a file: NotADirectoryError."""
    out_dir = out_dir or os.getcwd()
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise NotADirectoryError(f"--out {out_dir} is a file: name a folder to write the notebook into")
    target = notebook_path(path, out_dir)
    if os.path.exists(target) and not force:
        raise FileExistsError(f"{target} exists (your worked notebook?) and is kept: --force overwrites it, or "
                              f"--out DIR writes elsewhere")
    os.makedirs(out_dir, exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        json.dump(build(path), f, indent=1)
        f.write("\n")
    return target


CHECK_TAG = "exercise-check"         # the cell that grades: `check --file` runs every code cell but this one
SETUP = ("# lessons.exercises... imports from the repository of the tinyattn imported here (a clone, or an editable "
         "install)\nfrom tinyattn.lesson import repository_on_path\n\n"
         "assert repository_on_path(), \"this tinyattn is not a clone's: the exercises and their checker live in one\"")


def exercise_notebook(path):
    """The notebook of an exercise file: its statement (the docstring), a cell that puts the repository on the path,
    the file's code to fill in, and the cell that grades it."""
    text = open(path, encoding="utf-8").read()
    module = ast.parse(text)
    statement, name = ast.get_docstring(module), os.path.splitext(os.path.basename(path))[0]
    code = "\n".join(text.splitlines()[module.body[0].end_lineno:]).strip("\n")
    title, _, rest = statement.partition("\n")
    return _notebook([
        ("markdown", f"# {title}\n\n```text\n{rest.strip()}\n```", {}), ("code", SETUP, {}), ("code", code, {}),
        ("markdown", f"Run the cell below to grade your code: the steps of `python -m lessons check {name}`.", {}),
        ("code", f"from lessons.checker import check_notebook\n\ncheck_notebook({name!r}, globals())",
         {"tags": [CHECK_TAG]})])


def notebook_code(path):
    """(cell number from 1, source) of each code cell of a notebook file but the grading one."""
    with open(path, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    return [(i + 1, "".join(cell["source"])) for i, cell in enumerate(cells)
            if cell["cell_type"] == "code" and CHECK_TAG not in cell["metadata"].get("tags", [])]
