"""A lesson as a Jupyter notebook: `python -m lessons 02 --notebook [--out DIR]` writes 02_dates_attention.ipynb.

Markdown cells stay markdown, code cells stay code, in the file's order. The notebook imports everything from the
installed tinyattn package, so it runs wherever it is saved; TINYATTN_QUICK=1 in the kernel's environment runs the
lesson's --quick configuration. Figures show inline and are still written under plots/.
"""
import json
import os

from lessons.cells import raw_cells


def _source(text):
    lines = text.rstrip("\n").split("\n")
    return [line + "\n" for line in lines[:-1]] + lines[-1:]


def notebook(path):
    """The notebook (a dict in nbformat 4.5) of a lesson file."""
    cells = []
    for i, (kind, text, _) in enumerate(raw_cells(path)):
        cell = {"cell_type": kind, "id": f"cell-{i}", "metadata": {}, "source": _source(text)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    return {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}}}


def write_notebook(path, out_dir=None):
    """Write the lesson's notebook into out_dir (default: the current folder); returns its path."""
    out_dir = out_dir or os.getcwd()
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, os.path.splitext(os.path.basename(path))[0] + ".ipynb")
    with open(target, "w", encoding="utf-8") as f:
        json.dump(notebook(path), f, indent=1)
        f.write("\n")
    return target
