"""A lesson as a Jupyter notebook: `python -m lessons 02 --notebook [--out DIR]` writes 02_dates_attention.ipynb.

jupytext reads the lesson's `# %%` cells (markdown cells stay markdown, code cells stay code, in the file's order) and
nbformat writes the notebook. The notebook imports everything from the installed tinyattn package, so it runs
wherever it is saved; TINYATTN_QUICK=1 in the kernel's environment runs the lesson's --quick configuration. Figures
show inline and are still written under plots/.

An exercise as a notebook: `python -m lessons exercises --notebook [--out DIR] [NAME ...]` writes NAME.ipynb, the
exercise's statement, its code to fill in (from lessons/exercises/NAME.py as it is now) and a last cell that grades
the notebook's own code with the checker; `python -m lessons check NAME --file NAME.ipynb` grades it the same way.
"""
import ast
import json
import os

KERNEL = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
          "language_info": {"name": "python"}}


def _notebook_tools():
    """jupytext and nbformat, which the notebook extra installs; without them, one line saying how to get them."""
    try:
        import jupytext
        import nbformat
    except ImportError as error:
        raise ImportError(f"writing notebooks needs jupytext and nbformat ({error.name} is missing): "
                          "pip install -e '.[notebook]'") from None
    return jupytext, nbformat


def notebook(path):
    """The notebook (an nbformat 4 notebook) of a lesson file, read by jupytext from its `# %%` cells."""
    jupytext, _ = _notebook_tools()
    made = jupytext.read(path, fmt="py:percent")
    made.metadata = dict(KERNEL)              # no jupytext pairing: the notebook stands on its own
    return made


def _notebook(cells):
    """The notebook of cells, each (kind, text, metadata)."""
    _, nbformat = _notebook_tools()
    new = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    return nbformat.v4.new_notebook(cells=[new[kind](text.strip("\n"), metadata=metadata)
                                           for kind, text, metadata in cells], metadata=dict(KERNEL))


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
    _, nbformat = _notebook_tools()
    nbformat.write(build(path), target)
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
