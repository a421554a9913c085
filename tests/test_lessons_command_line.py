"""The lessons' command line refuses what it cannot do with one line and exit code 2, instead of a traceback or a
silent full run."""
import os
import pathlib
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
