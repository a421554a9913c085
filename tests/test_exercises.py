"""The exercises and their checker: every bundled solution passes, every untouched stub fails saying so, a wrong
answer fails with gradcheck's message, and F.use puts a learner's Function into every model and takes it out again."""
import json
import multiprocessing
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
from lessons.checking import registry  # noqa: E402

EXERCISES = list(checker._exercises)
SOLUTIONS = checker.EXERCISES / "solutions"
# A student copy (python -m lessons student-copy) has no solutions, and its lessons/exercises/ holds the student's
# work: the tests that need the solutions or the untouched stubs skip there.
instructors = pytest.mark.skipif(not SOLUTIONS.is_dir(), reason="a student copy: no solutions/, and "
                                                                "lessons/exercises/ holds the student's work")


@pytest.fixture(autouse=True)
def _nothing_in_use():
    yield
    F.use()                     # a failing test must not leave its Function in every later test's models


def grade(capsys, *argv):
    code = checker.main(["check", *argv])
    return code, capsys.readouterr().out


def test_every_exercise_has_a_file_and_a_check_of_its_own():
    checks = pathlib.Path(registry.checks.__file__).parent
    assert {p.stem for p in checks.glob("*.py")} - {"__init__"} == set(EXERCISES)
    assert {p.stem for p in checker.EXERCISES.glob("*.py")} - {"__init__", "given"} == set(EXERCISES)


def test_the_registry_lists_the_checks_folder_in_the_lessons_order(tmp_path, monkeypatch):
    """A file dropped into checks/ registers itself, in its lesson's place; one without a marked check is an error
    naming the file."""
    folder = tmp_path / "checks"
    shutil.copytree(pathlib.Path(registry.checks.__file__).parent, folder)
    (folder / "zz_new.py").write_text("from lessons.checking.checks import exercise\n\n\n"
                                      "@exercise('03', 'a new one', place=2)\ndef zz_new(learner):\n    pass\n")
    monkeypatch.setattr(registry.checks, "__file__", str(folder / "__init__.py"))
    monkeypatch.setattr(registry.checks, "__path__", [str(folder)])
    for name in [m for m in sys.modules if m.startswith("lessons.checking.checks.")]:
        monkeypatch.delitem(sys.modules, name)
    names = list(registry._listed())
    assert names[names.index("softmax_backward"):][:3] == ["softmax_backward", "attention", "zz_new"]
    assert set(names) == set(EXERCISES) | {"zz_new"}
    (folder / "zz_unmarked.py").write_text("def zz_unmarked(learner):\n    pass\n")
    with pytest.raises(ImportError, match="zz_unmarked.py has no check function zz_unmarked"):
        registry._listed()


@instructors
def test_every_exercise_has_a_solution():
    assert {p.stem for p in SOLUTIONS.glob("*.py")} - {"__init__"} == set(EXERCISES)


@instructors
@pytest.mark.parametrize("name", EXERCISES)
def test_bundled_solution_passes(name, capsys):
    code, out = grade(capsys, name, "--solution")
    assert code == 0 and f"{name}: PASSED" in out, out


@instructors
@pytest.mark.parametrize("name", EXERCISES)
def test_untouched_stub_fails_saying_not_implemented_yet(name, capsys):
    code, out = grade(capsys, name)
    assert code == 1, f"lessons/exercises/{name}.py should be the untouched stub\n{out}"
    assert "NotImplementedError: not implemented yet" in out and f"{name}: FAILED" in out
    assert f"at {name}.py line " in out                           # points at the TODO in the learner's file


def with_mistake(tmp_path, name, *replacements):
    """The bundled solution of exercise name with each (right, wrong) replacement made, as the learner's file."""
    text = (SOLUTIONS / f"{name}.py").read_text()
    for right, wrong in replacements:
        assert right in text
        text = text.replace(right, wrong)
    mine = tmp_path / f"{name}.py"
    mine.write_text(text)
    return str(mine)


@instructors
def test_a_wrong_backward_fails_with_gradchecks_message(tmp_path, capsys):
    """The loop of the exercises' guide: a missing scale in dQ fails the gradcheck, which says it is a factor everywhere, that
    dk and dv are right, and which mistake the numbers match."""
    mine = with_mistake(tmp_path, "attention", ("grad_q = ctx.scale * (grad_s @ k)", "grad_q = grad_s @ k"))
    code, out = grade(capsys, "attention", "--file", mine)
    assert code == 1
    assert "FAIL  gradcheck in float64" in out and "dq: gradcheck failed for q = input 0" in out
    assert "analytic / numerical 2 at every one" in out          # scale 0.5 missing: twice the true gradient
    assert "no mask: dq wrong, dk and dv right: look at dQ = scale dS K alone" in out
    assert "looks like this mistake: the scale is missing in dQ" in out
    assert "also is_causal, 3 queries and 5 keys: dq wrong, dk and dv right" in out     # every case, one line each


@instructors
def test_every_gradient_is_reported_and_a_missing_row_sum_is_named(tmp_path, capsys):
    """Without softmax's row-sum term dq and dk are wrong and dv right: the report says so for each, and points at
    the softmax's backward, before the check stops."""
    mine = with_mistake(tmp_path, "attention", ("grad_s = p * (grad_p - (grad_p * p).sum(axis=-1, keepdims=True))",
                                                "grad_s = p * grad_p"))
    code, out = grade(capsys, "attention", "--file", mine)
    assert code == 1
    assert "no mask: dq and dk wrong, dv right: look at the softmax's backward" in out
    assert "dq: gradcheck failed for q = input 0" in out and "dk: gradcheck failed for k = input 1" in out
    assert "looks like this mistake: the row-sum term of the softmax's backward is missing" in out
    assert "also a learned float mask (3, 5): dq, dk and dmask wrong, dv right" in out


@instructors
def test_a_mask_applied_after_the_softmax_is_named_and_the_cases_without_a_mask_pass(tmp_path, capsys):
    mine = with_mistake(tmp_path, "attention",
                        ("s = xp.where(mask, s, xp.asarray(-xp.inf, dtype=s.dtype))", "pass"),
                        ("p = e / xp.where(total == 0, 1, total)",
                         "p = e / xp.where(total == 0, 1, total)\n        if mask is not None and mask.dtype == bool:\n"
                         "            p = xp.where(mask, p, 0)"))
    code, out = grade(capsys, "attention", "--file", mine)
    assert code == 1 and "the forward is wrong" in out
    assert "looks like this mistake: the mask is applied after the softmax" in out
    assert "passed: no mask; k and v (1, 2, 5, .) broadcast over q's batch" in out


@instructors
def test_a_product_the_wrong_way_round_gets_the_shapes(tmp_path, capsys):
    mine = with_mistake(tmp_path, "attention", ("grad_v = xp.swapaxes(p * drop, -1, -2) @ grad",
                                                "grad_v = (p * drop) @ grad"))
    code, out = grade(capsys, "attention", "--file", mine)
    assert code == 1 and "FAIL  your Attention runs forward and backward" in out
    assert "in backward: grad_v = (p * drop) @ grad" in out                           # the learner's line
    assert "dV (2, 2, 5, 3) = P^T (2, 2, 5, 3) dO (2, 2, 3, 3)" in " ".join(out.split())     # across wrapped lines


@instructors
def test_a_forward_of_the_wrong_shape_is_named_before_the_backward_runs(tmp_path, capsys):
    mine = with_mistake(tmp_path, "attention", ("return (p * drop) @ v", "return ((p * drop) @ v)[..., :2, :]"))
    code, out = grade(capsys, "attention", "--file", mine)
    assert code == 1 and "broadcast" not in out
    assert "your forward returned an output of shape (2, 2, 2, 3); it must be (2, 2, 3, 3)" in out


@instructors
def test_attention_without_dropout_fails_its_dropout_step_saying_what_dropout_asks(tmp_path, capsys):
    mine = with_mistake(tmp_path, "attention", ("drop = dropout_scale(p.shape, dropout_p, q) if dropout_p else 1.0",
                                                "drop = 1.0"))
    code, out = grade(capsys, "attention", "--file", mine)
    assert code == 1 and "FAIL  dropout 0.3 (the same seed on both paths)" in out
    assert "no mask: output, dq, dk and dv wrong" in out and "D = dropout_scale(P.shape, dropout_p, q)" in out


@instructors
def test_a_transformer_with_attention_dropout_trains_on_the_exercises_attention_and_grouped_query_says_what_to_do():
    """Lesson 05's Transformer (dropout 0.1, in training mode) runs on the attention exercise's solution; the
    grouped_query exercise has no dropout and says how to run without."""
    from lessons.exercises.solutions.attention import Attention
    from lessons.exercises.solutions.grouped_query import GroupedQueryAttention
    model = models.Transformer(models.TransformerConfig(src_vocab=7, tgt_vocab=7, d_model=8, num_heads=2, n_layers=1,
                                                        dropout=0.1))
    src, tgt = ta.tensor(np.arange(12).reshape(2, 6) % 7), ta.tensor(np.arange(10).reshape(2, 5) % 7)
    with F.use(scaled_dot_product_attention=Attention):
        model(src, tgt).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    with F.use(scaled_dot_product_attention=GroupedQueryAttention), pytest.raises(ValueError, match="model.eval()"):
        model(src, tgt)
    model.eval()
    with F.use(scaled_dot_product_attention=GroupedQueryAttention):
        model(src, tgt)


@instructors
def test_softmax_without_its_row_sum_is_named(tmp_path, capsys):
    mine = with_mistake(tmp_path, "softmax_backward", ("y * (grad - (grad * y).sum(axis=ctx.dim, keepdims=True))",
                                                       "y * grad"))
    code, out = grade(capsys, "softmax_backward", "--file", mine)
    assert code == 1 and "looks like this mistake: the row-sum term is missing" in out


@instructors
def test_a_wrong_answer_that_passes_gradcheck_fails_against_the_reference(tmp_path, capsys):
    """A causal mask off by one is a different function, with a correct gradient: only the comparison catches it."""
    mine = with_mistake(tmp_path, "causal_mask", ("cols <= rows + offset", "cols < rows + offset"))
    code, out = grade(capsys, "causal_mask", "--file", mine)
    assert code == 1 and "causal_mask(5, 5, 0) differs at 5 of 25 places" in out


@instructors
def test_an_induction_score_averaged_over_every_query_fails_on_the_perfect_pattern(tmp_path, capsys):
    """Queries without an earlier copy of their token must not count: averaged over all of them, a perfect induction
    head scores the share of queries in the second copy, not 1."""
    mine = with_mistake(tmp_path, "induction_score", ("/ counted.sum()", "/ counted.size"))
    code, out = grade(capsys, "induction_score", "--file", mine)
    assert code == 1 and "FAIL  a random sequence of 5 tokens repeated once" in out
    assert "yours 0.5, reference 1;" in out                      # 5 of the 10 queries of each sequence count


FORGETS_TO_RESCALE_ACC = ("acc = alpha * acc + p @ v", "acc = acc + p @ v")
TRACE = "your trace beside the library's, at the first tile where they differ"


FORWARD_FIRST = "FAIL  your forward's output and L equal the reference path's (before any gradient)"


@instructors
def test_a_flash_forward_that_forgets_to_rescale_acc_shows_its_trace_beside_the_librarys(tmp_path, capsys):
    """The forward's output and L are held to the reference path's before any gradient (the backward is given):
    output wrong, L right, pointing at acc. Then the learner's trace(m, l, acc) calls, which come back from the
    child as arrays: the first tile where acc leaves the library's is named (causal blocks of 16: tile 3 of 6 is the
    first to add to an acc summed against an older max), with each row's m before and after and alpha beside it
    and both sides' acc; the verdict stays the steps'."""
    mine = with_mistake(tmp_path, "flash_forward", FORGETS_TO_RESCALE_ACC)
    code, out = grade(capsys, "flash_forward", "--file", mine)
    assert code == 1 and FORWARD_FIRST in out and "flash_forward: FAILED" in out
    assert "gradcheck" not in out
    assert "no mask, 5 queries and 7 keys in blocks of 2: output wrong, L right: L is right, so m and l are: look " \
           "at\n          acc" in out
    assert out.index(FORWARD_FIRST) < out.index(TRACE)
    assert "forward tile 3 of 6 (query rows 16-31, keys 16-31): acc differs" in out
    assert "m before          m    alpha  acc (head 0)" in out and "whose alpha\n          < 1" in out
    assert "acc, yours (head 0, shape (16, 8)):" in out and "acc, the library's (head 0, shape (16, 8)):" in out
    # Graded (every step runs), the forward's step stands in the gradcheck's place: the same number of steps.
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(mine, folder)
    checker.main(["check", "all", "--dir", str(folder), "--json"])
    graded = {r["exercise"]: r for r in json.loads(capsys.readouterr().out)["exercises"]}["flash_forward"]
    assert [(s["step"], s["passed"]) for s in graded["steps"]][:3] == [
        ("your FlashAttention runs forward and backward", True), (FORWARD_FIRST[6:], False),
        ("output and dq, dk, dv equal the reference path's", False)]
    assert graded["steps_total"] == 5


@instructors
def test_a_flash_forward_whose_l_is_m_plus_l_is_told_the_output_agrees_and_l_does_not(tmp_path, capsys):
    """L = m + l: the output agrees, L does not, and the message says so, names the mistake, and shows, after the
    first row block's last tile, each row's m, l, m + log l and the learner's L."""
    mine = with_mistake(tmp_path, "flash_forward", ("m + xp.log(xp.where(seen, l, 1))", "m + xp.where(seen, l, 1)"))
    code, out = grade(capsys, "flash_forward", "--file", mine)
    assert code == 1 and FORWARD_FIRST in out and "gradcheck" not in out
    assert "no mask, 5 queries and 7 keys in blocks of 2: L wrong, output right: L is each row's log-sum-exp" in out
    assert "looks like this mistake: L = m + l: L is m + log l" in out
    assert "L of query rows 0-15, after forward tile 1 of 6 (query rows 0-15, keys 0-15): L differs" in out
    assert "row          m          l  m + log l      yours" in out and "L, yours" not in out


def test_flash_forwards_mistakes_of_l_are_named_only_when_the_numbers_match():
    from lessons import mistakes
    m, l = np.array([[1.5], [-2.0], [-np.inf]]), np.array([[2.0], [3.0], [0.0]])      # the last row sees no key
    log_l = np.log(np.where(l > 0, l, 1))
    right = np.where(l > 0, m + log_l, np.inf)
    pattern = mistakes.FLASH_FORWARD_PATTERNS[frozenset({"L"})]
    for mine, named in ((np.where(l > 0, m + l, np.inf), "L = m + l"), (np.where(l > 0, log_l, np.inf), "L = log l"),
                        (np.where(l > 0, m, np.inf), "L = m:"), (np.where(l > 0, right, 0.0), "must get L = +inf")):
        hints = mistakes.flash_forward(mine, m, l, {"L"})
        assert hints[0] == pattern and len(hints) == 2 and named in hints[1], (named, hints)
    assert mistakes.flash_forward(right + 0.5, m, l, {"L"}) == [pattern]               # no mistake it matches
    assert mistakes.flash_forward(right, m, l, {"output"})[0].startswith("L is right, so m and l are: look at acc")


@instructors
def test_a_flash_backward_without_its_row_term_shows_the_first_tile_whose_ds_differs(tmp_path, capsys):
    mine = with_mistake(tmp_path, "flash_backward", ("grad_s = p * (grad_p - D[..., rows, :])", "grad_s = p * grad_p"))
    code, out = grade(capsys, "flash_backward", "--file", mine)
    assert code == 1 and TRACE in out
    assert "backward tile 1 of 6 (query rows 0-15, keys 0-15): ds differs" in out and "ds, yours (head 0" in out


@instructors
def test_no_trace_calls_or_a_passing_solution_show_no_trace(tmp_path, capsys):
    """The trace is optional: a failing loop that never calls trace, a passing solution and the untouched stub show
    no trace section, and nothing about it fails."""
    mine = with_mistake(tmp_path, "flash_forward", FORGETS_TO_RESCALE_ACC, ("trace(m, l, acc)", "pass"))
    code, out = grade(capsys, "flash_forward", "--file", mine)
    assert code == 1 and FORWARD_FIRST in out and TRACE not in out
    code, out = grade(capsys, "flash_forward", "--solution")
    assert code == 0 and TRACE not in out
    code, out = grade(capsys, "flash_backward")
    assert code == 1 and "not implemented yet" in out and TRACE not in out


@instructors
def test_a_bpe_merge_that_reuses_the_right_half_is_named_with_the_first_string_whose_ids_differ(tmp_path, capsys):
    """A merge step that joins the pair and still keeps its right half: the given encode runs, and the comparison
    with the library's ByteLevelBPE on the probe strings names the first string that differs, with both sides' ids
    and tokens from the first id that differs."""
    mine = with_mistake(tmp_path, "bpe", ("i += 2", "i += 1"))
    code, out = grade(capsys, "bpe", "--file", mine)
    assert code == 1 and "ok    your merge and encode_piece run" in out
    assert "FAIL  ids equal the library's ByteLevelBPE's (500 merges) on the 1,000 probe strings" in out
    assert "strings; the first is string 0 (scripts): '" in out
    assert "yours: 101 ids; from position 0 on: [" in out and "the library's: 79 ids; from position 0 on: [" in out
    assert "= tokens [" in out


@instructors
def test_a_bpe_that_calls_the_librarys_tokenizer_is_refused(tmp_path, capsys):
    mine = tmp_path / "bpe.py"
    mine.write_text("import numpy as np\n\nfrom tinyattn.preprocessing.bpe import ByteLevelBPE\n\n\n"
                    "def encode_batch(texts, vocab, merges, special_tokens):\n"
                    "    tokenizer = ByteLevelBPE(vocab, merges, {t: vocab[t] for t in special_tokens})\n"
                    "    return [np.array(tokenizer.encode(text).ids) for text in texts]\n")
    code, out = grade(capsys, "bpe", "--file", str(mine))
    assert code == 1 and "bpe: REFUSED" in out and "FAIL  your own work" in out
    assert "ByteLevelBPE of the library" in out and "was called by the submission" in out


@instructors
def test_float64_in_a_float32_backward_fails(tmp_path, capsys):
    mine = with_mistake(tmp_path, "label_smoothing", (".astype(log_p.dtype)", ""))
    code, out = grade(capsys, "label_smoothing", "--file", mine)
    assert code == 1 and "FAIL  float32 stays float32" in out and "float64 gradients" in out


@instructors
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
    shutil.copy(SOLUTIONS / "flash_forward.py", copy)
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
@instructors
def test_a_lesson_runs_on_the_learners_file_once_complete_else_the_solution_else_the_library(tmp_path):
    """What lesson 06 trains on: the learner's attention.py when no TODO is left, else the bundled solution, else
    (a student copy: no solutions/) the library's reference Function; the line returned says which."""
    exercises = tmp_path / "exercises"
    (exercises / "solutions").mkdir(parents=True)
    shutil.copy(checker.EXERCISES / "attention.py", exercises)
    shutil.copy(SOLUTIONS / "attention.py", exercises / "solutions")
    pick = lambda: checker.learners_or_bundled("attention", "Attention", ReferenceScaledDotProductAttention, exercises)
    function, which = pick()
    assert which.startswith("the bundled solution") and "has 2 TODOs left" in which
    assert pathlib.Path(function.forward.__code__.co_filename) == exercises / "solutions" / "attention.py"
    (exercises / "attention.py").write_text((exercises / "solutions" / "attention.py").read_text())
    function, which = pick()
    assert which.startswith("yours") and function.forward.__code__.co_filename == str(exercises / "attention.py")
    (exercises / "attention.py").write_text("from tinyattn.functional.attention import "
                                            "ReferenceScaledDotProductAttention as Attention\n")
    function, which = pick()
    assert which.startswith("the bundled solution") and "is the code of the library" in which
    (exercises / "attention.py").write_text("class Attention(:\n")
    assert "did not load: SyntaxError" in pick()[1] and pick()[1].startswith("the bundled solution")
    shutil.rmtree(exercises / "solutions")
    function, which = pick()
    assert function is ReferenceScaledDotProductAttention and "this copy has no solutions/" in which


def test_the_readmes_import_of_an_exercise_works_from_the_repository_root():
    line = "from lessons.exercises.attention import Attention"
    assert line in (ROOT / "lessons" / "exercises" / "README.md").read_text()
    ran = subprocess.run([sys.executable, "-c", line + "\nfrom lessons.exercises.grouped_query import "
                          "GroupedQueryAttention"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr


# -- the learner's own work ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, text", [
    ("attention", "from tinyattn.functional.attention import ReferenceScaledDotProductAttention as Attention\n"),
    pytest.param("attention", "from lessons.exercises.solutions.attention import Attention\n", marks=instructors),
    ("attention", "from tinyattn.functional.attention import ReferenceScaledDotProductAttention\n\n\n"
                  "class Attention(ReferenceScaledDotProductAttention):\n    pass\n"),
    ("attention", "from tinyattn import Function\nfrom tinyattn.functional import attention as library\n\n\n"
                  "class Attention(Function):\n    @staticmethod\n    def forward(ctx, *args):\n"
                  "        return library.ReferenceScaledDotProductAttention.forward(ctx, *args)\n\n"
                  "    @staticmethod\n    def backward(ctx, grad):\n"
                  "        return library.ReferenceScaledDotProductAttention.backward(ctx, grad)\n"),
    ("flash_forward", "from tinyattn import Function\n"
                      "from tinyattn.functional.flash_attention import ReferenceFlashAttention\n\n\n"
                      "class FlashAttention(Function):\n    forward = staticmethod(ReferenceFlashAttention.forward)\n\n"
                      "    @staticmethod\n    def backward(ctx, grad):\n        raise NotImplementedError\n"),
    ("causal_mask", "from tinyattn.functional import causal_mask\n"),
    ("induction_score", "from tinyattn import interpret\n\n\ndef induction_score(weights, tokens):\n"
                        "    return interpret.induction_score(weights, tokens)\n"),
], ids=["re-export", "solution", "subclass", "wrapper", "flash forward given back", "a function",
        "a function that calls the library's of its name"])
def test_a_file_that_hands_in_the_librarys_or_a_solutions_code_is_refused(name, text, tmp_path, capsys):
    mine = tmp_path / f"{name}.py"
    mine.write_text(text)
    code, out = grade(capsys, name, "--file", str(mine))
    assert code == 1 and f"{name}: REFUSED" in out, out
    assert "FAIL  your own work" in out and ("is the code of" in out or " calls " in out or " imports " in out)
    assert out.count("  ok  ") <= 1                  # at most "your file loads" (an import refused stops it), no step


@instructors
def test_a_missing_name_is_named(tmp_path, capsys):
    mine = tmp_path / "causal_mask.py"
    mine.write_text((SOLUTIONS / "causal_mask.py").read_text().replace("def padding_mask",
                                                                                            "def pad_mask"))
    code, out = grade(capsys, "causal_mask", "--file", str(mine))
    assert code == 1 and "LookupError: your file defines no padding_mask" in out


# -- grading every exercise ----------------------------------------------------------------------------------------
@instructors
def test_check_all_grades_a_folder_with_partial_credit_by_step_as_json(tmp_path, capsys):
    """check all --dir --json: every step of every exercise runs; a grade book gets each one's steps, score and
    whether it passed or was refused. A file that does not load, or is missing, fails the same steps (the totals do
    not depend on the file), and loading earns nothing."""
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(SOLUTIONS / "online_softmax.py", folder)
    shutil.copy(with_mistake(tmp_path, "attention", ("grad_q = ctx.scale * (grad_s @ k)", "grad_q = grad_s @ k")),
                folder)
    (folder / "causal_mask.py").write_text("from tinyattn.functional import causal_mask\n\n\n"
                                           "def padding_mask(lengths, key_len):\n    return None\n")
    (folder / "softmax_backward.py").write_text("class Softmax(:\n")
    code = checker.main(["check", "all", "--dir", str(folder), "--json"])
    captured = capsys.readouterr()
    grades = json.loads(captured.out)
    assert code == 1 and captured.err.startswith("tinyattn ")           # the steps went to stderr
    assert grades["tinyattn"] == str(ROOT / "tinyattn") and grades["exercises_total"] == len(EXERCISES)
    by_name = {r["exercise"]: r for r in grades["exercises"]}
    assert by_name["online_softmax"]["passed"] and by_name["online_softmax"]["score"] == 1.0
    attention = by_name["attention"]
    assert not attention["passed"] and 0 < attention["steps_passed"] < attention["steps_total"]
    assert [s["passed"] for s in attention["steps"]][:4] == [True, False, False, True]   # float32 still counts
    assert "is the code of the library" in by_name["causal_mask"]["refused"][0]
    assert by_name["causal_mask"]["steps_passed"] == 0
    code = checker.main(["check", "all", "--solution", "--json"])
    totals = {r["exercise"]: r["steps_total"] for r in json.loads(capsys.readouterr().out)["exercises"]}
    assert code == 0 and all(by_name[name]["steps_total"] == totals[name] for name in EXERCISES)
    for name in ("softmax_backward", "layer_norm_backward"):                  # did not load; missing
        assert by_name[name]["steps_passed"] == 0 and by_name[name]["score"] == 0.0
    assert grades["score"] == round(sum(r["score"] for r in grades["exercises"]) / len(EXERCISES), 4)
    with pytest.raises(SystemExit) as usage:
        checker.main(["check", "all", "--dir", str(tmp_path / "nowhere")])
    assert usage.value.code == 2 and "no such folder" in capsys.readouterr().err


@instructors
def test_check_all_prints_a_summary_table(capsys):
    code = checker.main(["check", "all"])
    out = capsys.readouterr().out
    assert code == 1                                              # the untouched stubs
    table = out[out.index("\n\nexercise "):].strip().splitlines()
    assert table[0].split() == ["exercise", "lesson", "steps", "score", "result"]
    assert table[2].split() == ["softmax_backward", "03", "0/6", "0.00", "failed"]
    assert table[-1].startswith(f"0 of {len(EXERCISES)} exercises passed; score 0.00")


# -- exercises as notebooks ----------------------------------------------------------------------------------------
def solved_notebook(path, name):
    """The exercise notebook at path with its code cell replaced by the bundled solution's code."""
    notebook = json.loads(path.read_text())
    solution = (SOLUTIONS / f"{name}.py").read_text()
    code = solution.split('"""', 2)[2].strip("\n")                       # the solution without its docstring
    [cell] = [c for c in notebook["cells"] if "NotImplementedError" in "".join(c["source"])]     # the code to write
    cell["source"] = code
    path.write_text(json.dumps(notebook))


@instructors
def test_exercises_as_notebooks_are_graded_by_the_checker(tmp_path, capsys):
    assert checker.main(["exercises", "--notebook", "--out", str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.ipynb")) == sorted(EXERCISES)
    notebook = tmp_path / "attention.ipynb"
    cells = json.loads(notebook.read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# Exercise · single-head")
    assert cells[-1]["metadata"]["tags"] == ["exercise-check"]
    capsys.readouterr()
    code, out = grade(capsys, "attention", "--file", str(notebook))
    assert code == 1 and 'at attention.ipynb, cell 3 line ' in out and 'raise NotImplementedError("not' in out
    solved_notebook(notebook, "attention")
    code, out = grade(capsys, "attention", "--file", str(notebook))
    assert code == 0 and "attention: PASSED every step" in out
    checker.main(["check", "all", "--dir", str(tmp_path), "--json"])                 # a folder of notebooks
    graded = {r["exercise"]: r for r in json.loads(capsys.readouterr().out)["exercises"]}
    assert graded["attention"]["passed"] and graded["attention"]["file"].endswith("attention.ipynb")
    assert not graded["rotary"]["passed"]


@instructors
def test_an_exercise_notebook_grades_itself_in_its_last_cell(tmp_path, capsys):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    checker.main(["exercises", "--notebook", "--out", str(tmp_path), "softmax_backward"])
    solved_notebook(tmp_path / "softmax_backward.ipynb", "softmax_backward")
    notebook = nbformat.read(str(tmp_path / "softmax_backward.ipynb"), as_version=4)
    nbclient.NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert "grading this notebook's code" in shown and "softmax_backward: PASSED every step" in shown
    assert [o for cell in notebook.cells for o in cell.get("outputs", []) if o["output_type"] != "stream"] == []


def test_a_missing_function_class_is_named(tmp_path, capsys):
    mine = tmp_path / "attention.py"
    mine.write_text("from tinyattn import Function\n\n\nclass Atention(Function):\n    pass\n")
    code, out = grade(capsys, "attention", "--file", str(mine))
    assert code == 1 and "FAIL  your Attention runs forward and backward" in out
    assert "LookupError: your file defines no Attention" in out


# -- submissions that try their luck: each runs in a child process, judged from outside ------------------------------
SOFTMAX = "from tinyattn import Function\n\n\nclass Softmax(Function):\n" \
          "    @staticmethod\n    def forward(ctx, x, dim):\n        {forward}\n\n" \
          "    @staticmethod\n    def backward(ctx, grad):\n        return None, None\n"


def softmax_file(tmp_path, forward="return x", top=""):
    mine = tmp_path / "softmax_backward.py"
    mine.write_text(top + SOFTMAX.format(forward=forward))
    return str(mine)


@pytest.mark.parametrize("top, forward, why", [
    ("import sys\nsys.exit(0)\n", "return x", "exited with status 0 before returning results"),
    ("raise SystemExit\n", "return x", "exited with status 0 before returning results"),
    ("", "import sys; sys.exit(0)", "exited with status 0 before returning results"),
    ("import os\nos._exit(0)\n", "return x", "exited with status 0 before returning results"),
    ("", "import os; os.kill(os.getpid(), 9)", "was killed by signal 9 (SIGKILL) before returning results"),
    ("", "import os\n        for fd in range(3, 64):\n            try:\n                os.write(fd, b'\\xff' * 64)\n"
         "            except OSError:\n                pass\n        while True:\n            pass",
     "returned something that is not a result"),
], ids=["exit at import", "SystemExit", "exit in forward", "os._exit", "killed", "garbage on the pipe"])
def test_a_file_that_ends_its_process_fails_with_the_reason(top, forward, why, tmp_path, capsys):
    code, out = grade(capsys, "softmax_backward", "--file", softmax_file(tmp_path, forward, top), "--timeout", "20")
    assert code == 1 and "softmax_backward: FAILED" in out and why in out, out


def test_check_all_grades_every_exercise_whatever_one_file_did(tmp_path, capsys):
    """A file that ended its process lost the whole grade book: now it fails, saying why, and the rest is graded."""
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "softmax_backward.py").write_text("import sys\nsys.exit(0)\n")
    (folder / "layer_norm_backward.py").write_text("import os\nos._exit(0)\n")
    shutil.copy(ROOT / "lessons" / "exercises" / "online_softmax.py", folder / "online_softmax.py")
    code = checker.main(["check", "all", "--dir", str(folder), "--json"])
    captured = capsys.readouterr()
    grades = json.loads(captured.out)
    assert code == 1 and len(grades["exercises"]) == len(EXERCISES) and grades["passed"] == 0
    assert captured.err.count("exited with status 0 before returning results") == 2
    assert "NotImplementedError: not implemented yet" in captured.err                # online_softmax graded too


def test_an_infinite_loop_times_out_and_the_steps_after_it_fail_at_once(tmp_path, capsys):
    mine = softmax_file(tmp_path, "while True:\n            pass")
    code, out = grade(capsys, "softmax_backward", "--file", mine, "--timeout", "1")
    assert code == 1 and "timed out after 1 s" in out
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "softmax_backward.py").write_text(pathlib.Path(mine).read_text())
    shutil.copy(ROOT / "lessons" / "exercises" / "online_softmax.py", loop / "online_softmax.py")
    code = checker.main(["check", "all", "--dir", str(loop), "--json", "--timeout", "1"])
    captured = capsys.readouterr()
    graded = {r["exercise"]: r for r in json.loads(captured.out)["exercises"]}
    assert graded["softmax_backward"]["steps_total"] == 6 and graded["softmax_backward"]["steps_passed"] == 0
    assert captured.err.count("timed out after 1 s") >= 6                   # every step: the time was spent
    assert "NotImplementedError" in captured.err and len(graded) == len(EXERCISES)    # the others still graded


def test_a_file_that_patches_the_checker_is_refused_and_the_grade_book_stands(tmp_path, capsys):
    """Replacing the checker's step made check all report every stub passed: the grader's modules are not the
    child's to import, and the verdict is the parent's."""
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "softmax_backward.py").write_text(
        "import contextlib\nimport lessons.checker as checker\n\n\n@contextlib.contextmanager\ndef step(*a, **k):\n"
        "    yield []\n\n\nchecker.step = step\n" + SOFTMAX.format(forward="return x"))
    (folder / "layer_norm_backward.py").write_text(
        "import sys\nfor name, module in list(sys.modules.items()):\n    if name.startswith('lessons.check'):\n"
        "        module.assert_close = lambda *a, **k: None\n" + SOFTMAX.format(forward="return x"))
    code = checker.main(["check", "all", "--dir", str(folder), "--json"])
    captured = capsys.readouterr()
    grades = json.loads(captured.out)
    by_name = {r["exercise"]: r for r in grades["exercises"]}
    assert code == 1 and grades["passed"] == 0 and grades["score"] == 0.0
    assert "your code imports lessons.checker" in by_name["softmax_backward"]["refused"][0]
    assert not by_name["layer_norm_backward"]["passed"] and by_name["layer_norm_backward"]["steps_passed"] == 0


@instructors
@pytest.mark.parametrize("how", [
    "exec(compile(open(SOLUTION).read(), 'mine.py', 'exec'))",
    "import importlib.util\nspec = importlib.util.spec_from_file_location('mine', SOLUTION)\n"
    "module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\nSoftmax = module.Softmax",
    "import importlib\nSoftmax = importlib.import_module('lessons.exercises.' + 'solutions.softmax_backward').Softmax",
    "import shutil, sys\nshutil.copy(SOLUTION, 'copied.py')\nsys.path.insert(0, '.')\nfrom copied import Softmax",
], ids=["exec(compile(...))", "an importlib wrapper", "import_module", "a copy"])
def test_a_file_that_runs_the_bundled_solution_is_refused_by_what_it_does(how, tmp_path, capsys, monkeypatch):
    """The audit hook's refusals, graded without the sandbox (whose child has no solutions/ to run)."""
    monkeypatch.setenv("TINYATTN_GRADER_SANDBOX", "none")
    mine = tmp_path / "softmax_backward.py"
    mine.write_text(f"SOLUTION = {str(SOLUTIONS / 'softmax_backward.py')!r}\n" + how + "\n")
    code, out = grade(capsys, "softmax_backward", "--file", str(mine))
    assert code == 1 and "softmax_backward: REFUSED" in out and "a bundled solution" in " ".join(out.split()), out


def test_a_file_that_calls_the_librarys_twin_out_of_sight_is_refused(tmp_path, capsys):
    """The source check cannot see a name built at run time: the child's stand-in for the library's Softmax sees
    the call."""
    mine = softmax_file(tmp_path, "import importlib\n        twin = getattr(importlib.import_module("
                                  "'tinyattn.functional.' + 'softmax'), 'Reference' + 'Softmax')\n"
                                  "        return twin.forward(ctx, x, dim)")
    code, out = grade(capsys, "softmax_backward", "--file", mine)
    assert code == 1 and "softmax_backward: REFUSED" in out, out
    assert "ReferenceSoftmax of the library" in out and "was called by the submission" in " ".join(out.split())


def test_forged_output_is_shown_as_the_learners_and_the_grade_book_is_the_parents(tmp_path, capsys):
    folder = tmp_path / "student"
    folder.mkdir()
    forged = json.dumps({"passed": 12, "exercises_total": 12, "score": 1.0, "exercises": []})
    (folder / "softmax_backward.py").write_text(f"import sys\nprint({forged!r})\nsys.stdout.flush()\n"
                                                f"open('/dev/stdout', 'w').write({forged!r})\n")
    code = checker.main(["check", "all", "--dir", str(folder), "--json"])
    captured = capsys.readouterr()
    grades = json.loads(captured.out)                                     # the parent's, whole
    assert code == 1 and grades["passed"] == 0 and len(grades["exercises"]) == len(EXERCISES)
    assert f"your code printed:\n    | {forged}" in captured.err
    assert "your code opens /dev/stdout" in captured.err


def test_a_child_has_a_memory_limit_on_the_cpu(tmp_path, capsys):
    mine = softmax_file(tmp_path, "import numpy\n        numpy.empty(6 << 30, dtype=numpy.uint8)\n        return x")
    code, out = grade(capsys, "softmax_backward", "--file", mine)
    assert code == 1 and "MemoryError" in out


@instructors
def test_the_grader_works_with_children_started_by_spawn(tmp_path, capsys, monkeypatch):
    """spawn is the default start method on macOS and Windows."""
    monkeypatch.setenv("TINYATTN_GRADER_START", "spawn")
    code, out = grade(capsys, "online_softmax", "--solution")
    assert code == 0 and "online_softmax: PASSED" in out
    code, out = grade(capsys, "softmax_backward", "--file", softmax_file(tmp_path, "import os; os._exit(3)"))
    assert code == 1 and "exited with status 3 before returning results" in out


@pytest.mark.parametrize("by_fd", [True, False], ids=["file descriptor (POSIX)", "Connection (Windows)"])
def test_the_pipes_messages_carry_arrays_and_plain_values_and_refuse_anything_else(by_fd, monkeypatch):
    from lessons.checking import protocol
    monkeypatch.setattr(protocol, "BY_FD", by_fd)
    ours, theirs = multiprocessing.Pipe()
    value = {"args": [np.arange(6.0).reshape(2, 3), None, 0.5, True, (np.float32(2), [np.ones(2, bool)])],
             "stream": iter([np.zeros(1)])}
    protocol.write(ours, value)
    got = protocol.read(theirs)
    assert got["args"][0].tolist() == [[0, 1, 2], [3, 4, 5]] and got["args"][1:4] == [None, 0.5, True]
    assert isinstance(got["args"][4], tuple) and got["args"][4][0].dtype == np.float32
    assert got["args"][4][1][0].dtype == bool and [a.tolist() for a in got["stream"]] == [[0.0]]
    with pytest.raises(TypeError, match="cannot be sent"):
        protocol.write(ours, {"code": lambda: None})
    with pytest.raises(TypeError, match="object cannot be sent"):
        protocol.write(ours, np.array([print], dtype=object))
    for garbage in (b"\x07\x00\x00\x00{\"a\":1}", b"\x18\x00\x00\x00{\"array\":[\"|O\",[1]]}", b"\x01\x00"):
        with pytest.raises(protocol.Garbled):
            protocol.decode(garbage)
