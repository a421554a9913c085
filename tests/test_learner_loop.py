"""The learner's loop: stepping through a lesson in a real (pseudo-)terminal, lessons as notebooks, the lesson list."""
import json
import os
import pathlib
import pty
import select
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

LESSON = '''# %% [markdown]
# # 99 · A lesson for the test
# Three cells.

# %%
x = 21

# %% [markdown]
# ## This one fails

# %%
y = 1
raise ValueError("boom")

# %%
print("y is", x * 2)
'''


class Terminal:
    """A child process on a pseudo-terminal: send keys, wait for text."""

    def __init__(self, argv, cwd):
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1", "TERM": "dumb"})
        os.close(slave)
        self.seen = ""

    def expect(self, text, timeout=30):
        end = time.time() + timeout
        while text not in self.seen:
            ready, _, _ = select.select([self.master], [], [], max(0.0, end - time.time()))
            if not ready:
                raise AssertionError(f"did not see {text!r}; the terminal shows:\n{self.seen[-3000:]}")
            try:
                self.seen += os.read(self.master, 65536).decode(errors="replace")
            except OSError:
                break
        if text not in self.seen:
            raise AssertionError(f"did not see {text!r}; the terminal shows:\n{self.seen[-3000:]}")
        at = self.seen.index(text) + len(text)
        shown, self.seen = self.seen[:at], self.seen[at:]
        return shown

    def send(self, keys):
        os.write(self.master, keys.encode())

    def close(self):
        self.process.wait(timeout=30)
        os.close(self.master)
        return self.process.returncode


def stepping(path, text):
    """The stepper on a lesson of text written at path, in a pseudo-terminal."""
    path.write_text(text)
    code = f"from lessons import stepper; stepper.step_through({str(path)!r}, [])"
    return Terminal([sys.executable, "-c", code], cwd=ROOT)


def test_stepping_back_and_forth_inspecting_and_recovering_from_an_exception(tmp_path):
    lesson = tmp_path / "99_test_lesson.py"
    term = stepping(lesson, LESSON)
    assert "cell 1/3" in term.expect("quit > ")
    term.send("\n")                                        # run cell 1: x = 21
    assert "cell 2/3" in term.expect("quit > ")
    term.send("i\n")                                       # a Python prompt in the lesson's namespace
    term.expect(">>> ")
    term.send("print('x is', x)\n")
    term.expect("x is 21")
    term.expect(">>> ")
    term.send("\x04")                                      # Ctrl-D: back to stepping
    term.expect("quit > ")
    term.send("\n")                                        # cell 2 raises
    failure = term.expect("quit > ")
    assert "ValueError: boom" in failure
    assert f'File "{lesson}", line 13' in failure          # the lesson's own file and line
    assert "cell 2/3" in failure                           # still on the cell that failed
    term.send("l\n")
    listing = term.expect("quit > ")
    assert "This one fails" in listing
    term.send("g 3\n")
    assert "cell 2 before cell 3 has not run" in term.expect("now? [y/N] > ")    # it stopped with an error
    term.send("n\n")
    term.expect("quit > ")
    term.send("\n")
    term.expect("y is 42")
    term.expect("end of the lesson")
    assert term.close() == 0


JUMPS = """# %%
x = 1

# %%
y = x + 1

# %%
z = y + 1

# %%
print("z is", z)
"""


def test_the_prompt_names_the_cell_r_reruns_and_a_jump_offers_the_cells_it_skips(tmp_path):
    term = stepping(tmp_path / "99_jumps.py", JUMPS)
    assert "[Enter] run 1 · b back · r rerun: none ·" in term.expect("quit > ")
    term.send("\n")                                        # cell 1 runs
    assert "r rerun 1 ·" in term.expect("quit > ")
    term.send("g 1\n")                                     # back to a cell that ran: r means it, nothing to offer
    shown = term.expect("quit > ")
    assert "cell 1/4" in shown and "[Enter] run 1 · b back · r rerun 1 ·" in shown and "have not run" not in shown
    term.send("g 4\n")                                     # ahead past cells 2 and 3
    assert "cells 2, 3 before cell 4 have not run" in term.expect("now? [y/N] > ")
    term.send("n\n")
    shown = term.expect("quit > ")
    assert "cell 4/4" in shown and "r rerun: none" in shown  # cell 4 has not run: r has nothing to rerun
    term.send("\n")
    failure = term.expect("quit > ")
    assert "NameError: name 'z' is not defined" in failure and "r rerun 4 ·" in failure
    term.send("l\n")
    listing = term.expect("quit > ").splitlines()
    assert [line[:5] for line in listing if line[3:5].strip().isdigit()] == [" +  1", "    2", "    3", ">x  4"]
    term.send("g 4\n")
    assert "cells 2, 3 before cell 4 have not run" in term.expect("now? [y/N] > ")
    term.send("y\n")
    shown = term.expect("quit > ")
    assert "running cell 2" in shown and "running cell 3" in shown and "r rerun 4 ·" in shown
    term.send("r\n")
    term.expect("z is 3")
    term.expect("end of the lesson")
    assert term.close() == 0


def test_stepping_without_a_terminal_runs_every_cell_and_help_says_how(tmp_path):
    listing = subprocess.run([sys.executable, "-m", "lessons"], cwd=ROOT, capture_output=True, text=True)
    assert listing.returncode == 0
    assert "03  From an attention layer to multi-head self-attention" in listing.stdout   # no '#' or number left
    helped = subprocess.run([sys.executable, "-m", "lessons", "03", "--step", "--help"], cwd=ROOT,
                            capture_output=True, text=True)
    assert "g N goes to cell N" in helped.stdout
    env = {**os.environ, "TINYATTN_PLOTS": str(tmp_path)}
    stepped = subprocess.run([sys.executable, "-m", "lessons", "03", "--step", "--quick"], cwd=ROOT, env=env,
                             capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert stepped.returncode == 0, stepped.stderr[-2000:]
    assert "cell 1/" in stepped.stdout and stepped.stdout.rstrip().splitlines()[-1].startswith("RESULT ")


def test_a_lesson_as_a_notebook_runs_anywhere_and_shows_its_figures(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    written = subprocess.run([sys.executable, "-m", "lessons", "03", "--notebook", "--out", str(tmp_path)], cwd=ROOT,
                             capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    path = tmp_path / "03_self_attention.ipynb"
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown" and any(c["cell_type"] == "code" for c in cells)
    notebook = nbformat.read(str(path), as_version=4)
    os.environ["TINYATTN_QUICK"] = "1"
    os.environ["TINYATTN_PLOTS"] = str(tmp_path / "figures")
    try:
        nbclient.NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        del os.environ["TINYATTN_QUICK"], os.environ["TINYATTN_PLOTS"]
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs)              # figures inline
    assert list((tmp_path / "figures").glob("03_*.png"))                        # and written to disk
    shown = "".join(o.get("text", "") for o in outputs)
    assert "hand-written vs F.scaled_dot_product_attention" in shown                # what the lesson prints
    assert "RESULT" not in shown and "figure: " not in shown and str(tmp_path / "figures") not in shown
    assert not [o for o in outputs if o["output_type"] == "execute_result"]      # no value echoed under a cell


def test_the_attention_explorer_in_a_notebook_has_sliders(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    pytest.importorskip("ipywidgets")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import numpy as np\n"
        "from tinyattn import viz\n"
        "maps = np.full((2, 3, 4, 5), 0.2)\n"
        "explorer = viz.explore_attention(maps, list('abcde'), list('wxyz'))"),
        nbformat.v4.new_code_cell("viz.explore_attention(maps[:1, :1], list('abcde'), list('wxyz'))")])
    nbclient.NotebookClient(notebook, timeout=120, store_widget_state=True,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in notebook.cells[0].outputs)
    widgets = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"].values()
    sliders = sorted((w["state"]["description"], w["state"]["max"]) for w in widgets
                     if w["model_name"] == "IntSliderModel")
    assert sliders == [("head", 2), ("layer", 1), ("query", 3), ("query", 3)]    # one layer and head: a query slider
    drawn = [o for w in widgets if w["model_name"] == "OutputModel" for o in w["state"]["outputs"]]
    assert any("image/png" in o.get("data", {}) for o in drawn)          # interact drew the first view
