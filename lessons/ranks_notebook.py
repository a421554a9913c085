"""A lesson run on several ranks, written as a notebook holding rank 0's outputs: the course site's page of a lesson
that a notebook kernel (one process, a world of 1) cannot show on more ranks (lesson 22).

    python -m tinyattn.distributed.run --nproc-per-node 2 -m lessons.ranks_notebook lessons/22_*.py OUT.ipynb

Every rank runs the lesson's code cells in order in one namespace, as a kernel runs a notebook's; rank 0 keeps what
each cell printed, and the figures it wrote, as that cell's outputs. As in a notebook, a figure is shown rather than
its path printed, and the closing RESULT line is left out (tinyattn.lesson.report prints none in a notebook).
TINYATTN_QUICK=1 runs the lesson's quick configuration.
"""
import base64
import contextlib
import io
import os
import sys
import tempfile

from lessons.notebook import _notebook_tools, notebook


def _shown(text):
    """What a notebook would show of a cell's printed text."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith(("figure: ", "RESULT ")))


def run(lesson, out):
    _, nbformat = _notebook_tools()
    book = notebook(lesson)
    speaks = os.environ.get("RANK", "0") == "0"
    with tempfile.TemporaryDirectory() as figures:
        os.environ["TINYATTN_PLOTS"] = figures
        sys.argv = [lesson]
        namespace = {"__name__": "__main__", "__file__": os.path.abspath(lesson), "__doc__": None}
        count = 0
        for cell in book.cells:
            if cell.cell_type != "code":
                continue
            count += 1
            before = set(os.listdir(figures))
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed) if speaks else contextlib.nullcontext():
                exec(compile(cell.source, f"{lesson} (cell {count})", "exec"), namespace)
            cell.execution_count = count
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=_shown(printed.getvalue()))] \
                if _shown(printed.getvalue()) else []
            for name in sorted(set(os.listdir(figures)) - before):
                with open(os.path.join(figures, name), "rb") as image:
                    png = base64.b64encode(image.read()).decode()
                cell.outputs.append(nbformat.v4.new_output("display_data", data={"image/png": png}))
    if speaks:
        nbformat.write(book, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    run(sys.argv[1], sys.argv[2])
