"""An instructor's student copy: the repository without the exercises' solutions, in which everything a student runs
works (lessons, the checker, the tests the copy carries)."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from lessons import student_copy

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (ROOT / "lessons" / "exercises" / "solutions").is_dir(),
                                reason="a student copy: making one is the instructor's repository's test")


def run(argv, cwd, package_from, timeout=120):
    """A command in cwd with tinyattn imported from package_from."""
    env = {**os.environ, "PYTHONPATH": str(package_from), "TINYATTN_PLOTS": str(cwd / "plots" / "runs")}
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    target = tmp_path_factory.mktemp("class") / "tinyattn"
    made = run(["-m", "lessons", "student-copy", str(target)], ROOT, ROOT)
    assert made.returncode == 0, made.stderr
    assert "without lessons/exercises/solutions/" in made.stdout
    return target


def test_the_copy_has_the_exercises_without_their_solutions(copy):
    assert (copy / "lessons" / "exercises" / "attention.py").read_text() == \
        (ROOT / "lessons" / "exercises" / "attention.py").read_text()
    assert (copy / "lessons" / "checker.py").exists() and (copy / "tests" / "test_exercises.py").exists()
    assert not (copy / "lessons" / "exercises" / "solutions").exists() and not (copy / ".git").exists()
    guide = (copy / "lessons" / "exercises" / "README.md").read_text()
    assert "## Reading a failure" in guide and "For instructors" not in guide
    assert "## For instructors" in (ROOT / "lessons" / "exercises" / "README.md").read_text()
    assert (copy / "README.md").read_text() == (ROOT / "README.md").read_text()


def test_a_student_checks_and_grades_in_the_copy(copy):
    checked = run(["-m", "lessons", "check", "attention"], copy, copy)
    assert checked.returncode == 1 and "NotImplementedError: not implemented yet" in checked.stdout
    assert checked.stdout.splitlines()[0].endswith(f"imported from {copy / 'tinyattn'}")
    graded = run(["-m", "lessons", "check", "all", "--json"], copy, copy)
    assert graded.returncode == 1 and json.loads(graded.stdout)["passed"] == 0
    refused = run(["-m", "lessons", "check", "attention", "--solution"], copy, copy)
    assert refused.returncode == 2 and "this copy has no lessons/exercises/solutions/" in refused.stderr


def test_the_tests_a_copy_carries_pass_without_the_solutions(copy):
    tested = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_exercises.py"], copy, copy)
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert " skipped" in tested.stdout.splitlines()[-1]


def test_lesson_06_trains_on_the_students_attention_in_the_copy(copy):
    """The student's attention.py, once complete, is what lesson 06 trains on; the lesson runs with no solutions."""
    mine = copy / "lessons" / "exercises" / "attention.py"
    stub = mine.read_text()
    shutil.copy(ROOT / "lessons" / "exercises" / "solutions" / "attention.py", mine)
    try:
        lesson = run(["lessons/06_gpt.py", "--quick"], copy, copy)
    finally:
        mine.write_text(stub)
    assert lesson.returncode == 0, lesson.stderr[-3000:]
    assert "the exercise's attention: yours, lessons/exercises/attention.py" in lesson.stdout


def test_a_lesson_of_one_clone_run_on_anothers_package_says_so(copy):
    lesson = run([str(copy / "lessons" / "03_self_attention.py"), "--quick"], copy, ROOT)
    lines = lesson.stdout.splitlines()
    assert lesson.returncode == 0 and lines[0].endswith(f"imported from {ROOT / 'tinyattn'}")
    assert lines[1].startswith(f"warning: tinyattn is imported from {ROOT / 'tinyattn'}, not from {copy}")


def test_a_copy_is_refused_into_a_full_folder_or_with_solved_stubs(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty"):
        student_copy.write(tmp_path / "full")
    repository = tmp_path / "repository"
    shutil.copytree(ROOT / "lessons" / "exercises", repository / "lessons" / "exercises")
    shutil.copy(repository / "lessons" / "exercises" / "solutions" / "rotary.py", repository / "lessons" / "exercises")
    with pytest.raises(ValueError, match="rotary.py in .* have no TODO left"):
        student_copy.write(tmp_path / "new", root=repository)
    assert not (tmp_path / "new").exists()


def test_the_guide_loses_only_the_part_for_instructors():
    guide = "# Exercises\ntext\n## The loop\nloop\n### a step\n## For instructors\nsolutions\n### more\nof it\n\n" \
            "## Reading a failure\nreading\n"
    assert student_copy.without_instructors(guide) == \
        "# Exercises\ntext\n## The loop\nloop\n### a step\n## Reading a failure\nreading\n"



def test_a_copy_is_refused_inside_the_repository_or_onto_a_file(tmp_path):
    with pytest.raises(ValueError, match="is inside the repository"):
        student_copy.write(ROOT / "class-copy")
    assert not (ROOT / "class-copy").exists()
    (tmp_path / "file").write_text("")
    made = run(["-m", "lessons", "student-copy", str(tmp_path / "file")], ROOT, ROOT)
    assert made.returncode == 2 and "is a file" in made.stderr and "Traceback" not in made.stderr
    made = run(["-m", "lessons", "student-copy", str(tmp_path / "file" / "copy")], ROOT, ROOT)   # cannot be made
    assert made.returncode == 1 and "Traceback" not in made.stderr
    assert made.stderr.strip().startswith("python -m lessons student-copy: cannot write the copy into")


def test_only_what_git_tracks_is_copied(tmp_path):
    """A folder of answers left untracked in the checkout is not handed out."""
    repository = tmp_path / "repository"
    (repository / "lessons").mkdir(parents=True)
    (repository / "lessons" / "tracked.py").write_text("x = 1\n")
    git = lambda *argv: subprocess.run(["git", *argv], cwd=repository, check=True, capture_output=True)
    git("init", "-q")
    git("add", "lessons/tracked.py")
    (repository / "submissions").mkdir()
    (repository / "submissions" / "alice.py").write_text("answers\n")
    assert student_copy.repository_files(repository) == ["lessons/tracked.py"]
