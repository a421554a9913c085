"""The lessons' command line refuses what it cannot do with one line and exit code 2, instead of a traceback or a
silent full run."""
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from tinyattn import lesson

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(*argv, tmp_path):
    env = {**os.environ, "TINYATTN_PLOTS": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "lessons", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_a_misspelt_option_stops_the_lesson_naming_it(tmp_path):
    result = run("02", "--quik", tmp_path=tmp_path)
    assert result.returncode == 2 and result.stdout == ""                  # nothing ran: no first line either
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line
    assert "unknown option --quik; did you mean --quick?" in result.stderr


def test_notebook_out_without_a_folder_prints_usage(tmp_path):
    for argv in (["03", "--notebook", "--out"], ["03", "--notebook", "--out", "--quick"]):
        result = run(*argv, tmp_path=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert "usage: python -m lessons 03 --notebook [--out DIR]" in result.stderr


def test_a_notebook_kernels_own_arguments_are_ignored_and_a_lessons_own_options_join(monkeypatch, tmp_path):
    monkeypatch.setenv("TINYATTN_PLOTS", str(tmp_path))
    monkeypatch.setattr(lesson.cpu, "tune_allocator", lambda: None)       # the test process keeps its allocator
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)                 # and its excepthook
    monkeypatch.setattr(lesson, "in_notebook", lambda: False)
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py", "-f", "/tmp/kernel-1.json"])
    with pytest.raises(SystemExit) as stopped:
        lesson.options()
    assert stopped.value.code == 2
    monkeypatch.setattr(lesson, "in_notebook", lambda: True)                # as inside a kernel
    assert lesson.options().quick is False
    monkeypatch.setattr(sys, "argv", ["99_lesson.py", "--steps", "7", "--quick"])
    args = lesson.options(arguments=[("--steps", dict(type=int, default=100))])
    assert (args.steps, args.quick) == (7, True)


def test_the_first_line_names_the_package_folder_and_warns_when_it_is_another_clones(tmp_path):
    package = str(ROOT / "tinyattn")
    first = subprocess.run([sys.executable, str(ROOT / "lessons" / "03_self_attention.py"), "--quick", "--plots",
                            str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120).stdout
    assert first.splitlines()[0].endswith(f"imported from {package}") and "warning" not in first
    checked = run("check", "online_softmax", tmp_path=tmp_path).stdout
    assert checked.splitlines()[0].startswith("tinyattn ") and checked.splitlines()[0].endswith(f"from {package}")
    assert lesson.another_clone(str(ROOT / "lessons" / "06_gpt.py")) is None
    assert lesson.another_clone("ipykernel_launcher.py") is None                  # a notebook: no repository
    warning = lesson.another_clone("/elsewhere/clone/lessons/06_gpt.py")
    assert warning.startswith(f"warning: tinyattn is imported from {package}, not from /elsewhere/clone")


def test_a_notebook_already_there_is_kept_unless_force(tmp_path):
    """A learner's worked notebook must not be overwritten by the stub's: lessons and exercises alike."""
    worked = tmp_path / "03_self_attention.ipynb"
    worked.write_text("my work")
    kept = run("03", "--notebook", "--out", str(tmp_path), tmp_path=tmp_path)
    assert kept.returncode == 1 and worked.read_text() == "my work" and "Traceback" not in kept.stderr
    assert "exists (your worked notebook?) and is kept: --force overwrites it" in kept.stderr
    assert run("03", "--notebook", "--out", str(tmp_path), "--force", tmp_path=tmp_path).returncode == 0
    assert worked.read_text() != "my work"
    (tmp_path / "rotary.ipynb").write_text("my work")
    kept = run("exercises", "--notebook", "--out", str(tmp_path), tmp_path=tmp_path)
    assert kept.returncode == 1 and "rotary.ipynb exists (worked notebooks?) and is kept" in kept.stderr
    assert not (tmp_path / "attention.ipynb").exists()                   # nothing written: all or none
    assert run("exercises", "--notebook", "--out", str(tmp_path), "--force", tmp_path=tmp_path).returncode == 0
    assert (tmp_path / "attention.ipynb").exists() and (tmp_path / "rotary.ipynb").read_text() != "my work"


@pytest.mark.parametrize("argv, says", [
    (["03", "--notebook", "--out", "FILE"], "is a file: name a folder"),
    (["exercises", "--notebook", "--out", "FILE"], "is a file: name a folder"),
    (["03", "--quick", "--seed", "-1"], "--seed -1: a seed is 0 or more"),
    (["03", "--quick", "--plots", "FILE"], "cannot be written"),
    (["03", "--quick", "--plots", "FILE/runs"], "cannot be written"),
    (["check", "online_softmax", "--file", "FOLDER"], "not a .py file or a notebook"),
    (["check", "online_softmax", "--file", "FOLDER/online_softmax.py.txt"], "not a .py file or a notebook"),
], ids=["lesson --out a file", "exercises --out a file", "--seed -1", "--plots a file", "--plots under a file",
        "check --file a folder", "check --file .py.txt"])
def test_what_cannot_be_done_is_said_in_one_line_before_anything_runs(argv, says, tmp_path):
    (tmp_path / "FILE").write_text("")
    (tmp_path / "FOLDER").mkdir()
    (tmp_path / "FOLDER" / "online_softmax.py.txt").write_text("")
    argv = [a.replace("FILE", str(tmp_path / "FILE")).replace("FOLDER", str(tmp_path / "FOLDER")) for a in argv]
    result = run(*argv, tmp_path=tmp_path)
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr
    assert says in result.stderr.strip().splitlines()[-1], result.stderr      # the last line (argparse: after usage)
    assert "trains" not in result.stdout and "·" not in result.stdout                  # no lesson ran


def test_ctrl_c_during_a_lesson_stops_it_with_one_line_and_exit_130(tmp_path):
    env = {**os.environ, "TINYATTN_PLOTS": str(tmp_path)}
    lesson = subprocess.Popen([sys.executable, "-m", "lessons", "02"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    lesson.stdout.readline()                                  # the first line: the run has started
    lesson.send_signal(signal.SIGINT)
    out, err = lesson.communicate(timeout=120)
    assert lesson.returncode == 130 and "Traceback" not in err and err.strip() == \
        "interrupted (Ctrl-C): the run stopped there"


INTERRUPTED = "interrupted (Ctrl-C): the run stopped there"


def interrupt(process, timeout=120):
    """Press Ctrl-C (SIGINT) once, as a learner would, and return the process's (stdout, stderr). Once must be
    enough: a Ctrl-C during the import of NumPy's random module (Cython) used to be swallowed, so a run just past its
    first line went on to its end (tinyattn/lesson.py now draws the generator before that line)."""
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=timeout)


def test_ctrl_c_during_a_lesson_run_as_a_script_stops_it_with_one_line_and_exit_130(tmp_path):
    """The README's first command, python lessons/02_dates_attention.py, ends as python -m lessons 02 does: the
    interrupt's one line last on stderr (after the progress bars, if the run got that far), and no traceback."""
    env = {**os.environ, "TINYATTN_PLOTS": str(tmp_path)}
    lesson = subprocess.Popen([sys.executable, "lessons/02_dates_attention.py"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    assert "seed 0" in lesson.stdout.readline()               # the first line: the run has started
    out, err = interrupt(lesson)
    assert lesson.returncode == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == INTERRUPTED and err.count(INTERRUPTED) == 1


@pytest.mark.parametrize("raised, code, says", [
    ("KeyboardInterrupt", 130, INTERRUPTED),
    ("ValueError('two')", 1, "ValueError: two")])
def test_a_lesson_script_ends_ctrl_c_in_one_line_and_keeps_other_tracebacks(tmp_path, raised, code, says):
    script = tmp_path / "99_script.py"
    script.write_text(f"from tinyattn.lesson import options\nargs = options()\nraise {raised}\n")
    ran = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TINYATTN_PLOTS": str(tmp_path)}, stdin=subprocess.DEVNULL)
    assert ran.returncode == code and ran.stderr.strip().splitlines()[-1] == says
    assert ("Traceback" in ran.stderr) == (code == 1)


STEPPED = "# %%\nprint('one')\n\n# %%\nraise ValueError('two')\n\n# %%\nprint('three')\n"


def test_the_stepper_without_a_terminal_runs_on_past_an_error_and_exits_1(tmp_path):
    path = tmp_path / "99_stepped.py"
    path.write_text(STEPPED)
    code = f"import sys; from lessons import stepper; sys.exit(stepper.step_through({str(path)!r}, []))"
    ran = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert ran.returncode == 1 and "three" in ran.stdout and "cell 2 stopped with an error" in ran.stderr


def test_the_stepper_without_a_terminal_stops_on_ctrl_c(tmp_path):
    path = tmp_path / "99_stepped.py"
    path.write_text(STEPPED.replace("raise ValueError('two')", "import os, signal\nos.kill(os.getpid(), signal.SIGINT)"))
    code = f"from lessons import stepper\ntry:\n    stepper.step_through({str(path)!r}, [])\n" \
           f"except KeyboardInterrupt:\n    print('stopped')"
    ran = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert "stopped" in ran.stdout and "three" not in ran.stdout               # the cells after it did not run


def test_every_lessons_notebook_holds_the_cells_the_stepper_steps_through(tmp_path):
    """The notebook writer reads a lesson with jupytext, the stepper with lessons.cells: the same cells, in order."""
    import json

    from lessons.__main__ import lesson_files
    from lessons.cells import raw_cells
    from lessons.notebook import write_notebook
    for path in lesson_files():
        cells = json.loads(pathlib.Path(write_notebook(path, tmp_path)).read_text())["cells"]
        assert [(c["cell_type"], "".join(c["source"]).strip("\n")) for c in cells] == \
            [(kind, text.strip("\n")) for kind, text, _ in raw_cells(path)], path
