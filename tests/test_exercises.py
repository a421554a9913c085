"""The exercises and their checker: every bundled solution passes, every untouched stub fails saying so, a wrong
answer fails with gradcheck's message, and F.use puts a learner's Function into every model and takes it out again."""
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models
from tinyattn.functional.attention import ReferenceScaledDotProductAttention
from tinyattn.functional.softmax import ReferenceSoftmax

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lessons import checker  # noqa: E402  (the repository root, not tests/, holds the lessons package)

EXERCISES = list(checker._exercises)


@pytest.fixture(autouse=True)
def _nothing_in_use():
    yield
    F.use()                     # a failing test must not leave its Function in every later test's models


def grade(capsys, *argv):
    code = checker.main(["check", *argv])
    return code, capsys.readouterr().out


def test_every_exercise_has_a_stub_and_a_solution():
    stubs = {p.stem for p in checker.EXERCISES.glob("*.py")} - {"__init__", "given"}
    solutions = {p.stem for p in (checker.EXERCISES / "solutions").glob("*.py")} - {"__init__"}
    assert stubs == solutions == set(EXERCISES)


@pytest.mark.parametrize("name", EXERCISES)
def test_bundled_solution_passes(name, capsys):
    code, out = grade(capsys, name, "--solution")
    assert code == 0 and f"{name}: PASSED" in out, out


@pytest.mark.parametrize("name", EXERCISES)
def test_untouched_stub_fails_saying_not_implemented_yet(name, capsys):
    code, out = grade(capsys, name)
    assert code == 1, f"lessons/exercises/{name}.py should be the untouched stub\n{out}"
    assert "NotImplementedError: not implemented yet" in out and f"{name}: FAILED" in out
    assert f"at {name}.py line " in out                           # points at the TODO in the learner's file


def test_a_wrong_backward_fails_with_gradchecks_message(tmp_path, capsys):
    """The loop of the README: a missing scale in dQ fails the gradcheck, and says it is a factor everywhere."""
    solution = (checker.EXERCISES / "solutions" / "attention.py").read_text()
    mine = tmp_path / "attention.py"
    mine.write_text(solution.replace("grad_q = ctx.scale * (grad_s @ k)", "grad_q = grad_s @ k"))
    code, out = grade(capsys, "attention", "--file", str(mine))
    assert code == 1
    assert "FAIL  gradcheck in float64" in out and "gradcheck failed for q = input 0" in out
    assert "analytic / numerical 2 at every one" in out          # scale 0.5 missing: twice the true gradient


def test_a_wrong_answer_that_passes_gradcheck_fails_against_the_reference(tmp_path, capsys):
    """A causal mask off by one is a different function, with a correct gradient: only the comparison catches it."""
    solution = (checker.EXERCISES / "solutions" / "causal_mask.py").read_text()
    mine = tmp_path / "causal_mask.py"
    mine.write_text(solution.replace("cols <= rows + offset", "cols < rows + offset"))
    code, out = grade(capsys, "causal_mask", "--file", str(mine))
    assert code == 1 and "causal_mask(5, 5, 0) differs at 5 of 25 places" in out


def test_float64_in_a_float32_backward_fails(tmp_path, capsys):
    solution = (checker.EXERCISES / "solutions" / "label_smoothing.py").read_text()
    mine = tmp_path / "label_smoothing.py"
    mine.write_text(solution.replace(".astype(log_p.dtype)", ""))
    code, out = grade(capsys, "label_smoothing", "--file", str(mine))
    assert code == 1 and "FAIL  float32 stays float32" in out and "float64 gradients" in out


def test_command_line(tmp_path):
    def run(*argv):
        return subprocess.run([sys.executable, "-m", "lessons", *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
    listing = run("exercises")
    assert listing.returncode == 0
    assert all(f"{name} " in listing.stdout for name in EXERCISES) and "TODOs left" in listing.stdout
    assert run("check", "online_softmax", "--solution").returncode == 0
    assert run("check", "online_softmax").returncode == 1
    unknown = run("check", "no_such_exercise")
    assert unknown.returncode == 2 and "softmax_backward" in unknown.stderr
    copy = tmp_path / "anywhere" / "flash_forward.py"             # a copy outside the repository still imports
    copy.parent.mkdir()                                          # the given helpers
    shutil.copy(checker.EXERCISES / "solutions" / "flash_forward.py", copy)
    assert run("check", "flash_forward", "--file", str(copy)).returncode == 0


# -- F.use: the learner's Function in every model -----------------------------------------------------------------
def counting(function, calls):
    """function, counting its forward calls in calls['forward']."""
    class Counted(function):
        @staticmethod
        def forward(ctx, *args):
            calls["forward"] = calls.get("forward", 0) + 1
            return function.forward(ctx, *args)
    return Counted


def tiny_gpt(**changes):
    ta.manual_seed(0)
    return models.GPT(models.GPTConfig(vocab_size=7, block_size=8, n_layer=2, num_heads=2, d_model=8, **changes))


def test_use_runs_a_models_attention_on_the_learners_function_on_both_paths():
    calls = {}
    ids = ta.tensor(np.arange(12).reshape(2, 6) % 7)
    with F.use(scaled_dot_product_attention=counting(ReferenceScaledDotProductAttention, calls)):
        tiny_gpt()(ids, ids)[1].backward()
        assert calls["forward"] == 2                             # one attention per layer
        with ta.reference():
            tiny_gpt()(ids)
        tiny_gpt(impl="reference")(ids)
    assert calls["forward"] == 6
    tiny_gpt()(ids)
    assert calls["forward"] == 6                                 # the block ended: the library's runs again


def test_use_restores_what_was_there_and_use_without_arguments_removes_all():
    first, second = {}, {}
    x = ta.randn(3, 4)
    with F.use(softmax=counting(ReferenceSoftmax, first)):
        with F.use(softmax=counting(ReferenceSoftmax, second)):
            F.softmax(x)
        F.softmax(x)
    F.softmax(x)
    assert (first["forward"], second["forward"]) == (1, 1)
    F.use(softmax=counting(ReferenceSoftmax, first))                # without `with`: stays until F.use()
    x.softmax()
    F.use()
    x.softmax()
    assert first["forward"] == 2


def test_use_refuses_unknown_names_and_non_functions_and_changes_nothing_then():
    with pytest.raises(ValueError, match="no public function named softmx.*softmax"):
        F.use(softmax=ReferenceSoftmax, softmx=ReferenceSoftmax)
    with pytest.raises(TypeError, match="layer_norm must be a subclass of tinyattn.Function"):
        F.use(softmax=ReferenceSoftmax, layer_norm=lambda x: x)
    with pytest.raises(TypeError):
        F.use(softmax=ReferenceSoftmax())
    assert F.twins.implementation("softmax") is not ReferenceSoftmax
    assert repr(F.use(softmax=ReferenceSoftmax)) == "use(softmax=ReferenceSoftmax)"


# -- lessons on the learner's file ---------------------------------------------------------------------------------
def test_a_lesson_runs_on_the_learners_file_once_complete_else_the_solution_else_the_library(tmp_path):
    """What lesson 06 trains on: the learner's attention.py when no TODO is left, else the bundled solution, else
    (a student copy: no solutions/) the library's reference Function; the line returned says which."""
    exercises = tmp_path / "exercises"
    (exercises / "solutions").mkdir(parents=True)
    shutil.copy(checker.EXERCISES / "attention.py", exercises)
    shutil.copy(checker.EXERCISES / "solutions" / "attention.py", exercises / "solutions")
    pick = lambda: checker.learners_or_bundled("attention", "Attention", ReferenceScaledDotProductAttention, exercises)
    function, which = pick()
    assert which.startswith("the bundled solution") and "has 2 TODOs left" in which
    assert pathlib.Path(function.forward.__code__.co_filename) == exercises / "solutions" / "attention.py"
    (exercises / "attention.py").write_text((exercises / "solutions" / "attention.py").read_text())
    function, which = pick()
    assert which.startswith("yours") and function.forward.__code__.co_filename == str(exercises / "attention.py")
    (exercises / "attention.py").write_text("class Attention(:\n")
    assert "did not load: SyntaxError" in pick()[1] and pick()[1].startswith("the bundled solution")
    shutil.rmtree(exercises / "solutions")
    function, which = pick()
    assert function is ReferenceScaledDotProductAttention and "this copy has no solutions/" in which


def test_the_readmes_import_of_an_exercise_works_from_the_repository_root():
    line = "from lessons.exercises.attention import Attention"
    assert line in (ROOT / "README.md").read_text()
    ran = subprocess.run([sys.executable, "-c", line + "\nfrom lessons.exercises.grouped_query import "
                          "GroupedQueryAttention"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
