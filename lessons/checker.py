"""The exercises' grader: lessons/exercises/NAME.py against the library's reference path.

    python -m lessons exercises                               list them, with how many TODOs each has left
    python -m lessons check NAME [--file PATH] [--solution]   grade lessons/exercises/NAME.py, or the copy at PATH,
                                                              or the bundled solution (lessons/exercises/solutions/)
    python -m lessons check all [--dir DIR] [--json]          grade every exercise (in DIR), every step of each:
                                                              a summary table, or JSON for a grade book

A check runs in steps and stops at the first that fails, saying why: an exception in your code with the line it
came from, gradcheck's message, or where your numbers leave the reference path's. A failing step still runs all its
cases, and gives a verdict on every output and gradient, right or wrong, with what the pattern points at and the
common mistake your numbers equal, where one does (lessons/mistakes.py). The steps are a float64 gradcheck, a
comparison with the reference path (`with ta.reference():`) on several shapes (masks, ragged lengths, broadcasting
where they apply), float32 staying float32, and, where a model can run on your Function, a short training run with
`F.use(...)` that must reach the loss the reference path reaches. Exit code 0 only on a pass.
"""
import argparse
import contextlib
import functools
import inspect
import json
import os
import pathlib
import sys
import textwrap
import traceback
from dataclasses import dataclass

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons import mistakes
from lessons.checking import runner
from lessons.checking.learners_file import (EXERCISES, LESSONS, Refused, borrowed, is_learner_file,  # noqa: F401
                                            learners_or_bundled, shown as _shown, todos_left)
from lessons.checking.learners_file import _learner_files
from lessons.notebook import exercise_notebook, notebook_path, write_notebook
from tinyattn import backend, interpret, lesson, models, nn, optim

TOLERANCE = 1e-10          # float64 against float64: the same math agrees to rounding
TRAINING_STEPS = 20


@dataclass
class Exercise:
    name: str
    lesson: str
    title: str
    check: callable
    given: tuple = ()
    twins: tuple = ()


_exercises = {}


def exercise(lesson, title, given=(), twins=()):
    """Register a check function under its own name, which is also its file's name in lessons/exercises/. given:
    the methods the exercise hands over from the library ("FlashAttention.backward"); every other forward and
    backward that the check reads from the learner's file must be the learner's own. twins: the library's versions
    of the answer (a public function with twins, "softmax", or "module:function"), which the child running the
    learner's file replaces with stand-ins that refuse the submission when called."""
    def register(check):
        _exercises[check.__name__] = Exercise(check.__name__, lesson, title, check, tuple(given), tuple(twins))
        return check
    return register


# -- running steps -------------------------------------------------------------------------------------------------
class Failed(Exception):
    """A step failed; what went wrong is printed already."""


class Mismatch(AssertionError):
    """The learner's numbers differ from the reference path's."""


class Run:
    """How the check in progress runs: a learner's check stops at the first step that fails; a grade (check all,
    --json) keeps going, so that every step counts for partial credit. steps: (description, passed) so far."""
    keep_going = False
    steps = []


class Step(list):
    """What a step's body gets: the list of notes to print under its "ok", and case(name), a block for one of the
    step's cases. A case that fails does not stop the others: the step fails after its body, reporting them all."""

    def __init__(self):
        super().__init__()
        self.failed, self.passed = [], []

    @contextlib.contextmanager
    def case(self, name):
        try:
            yield
        except Refused:
            raise
        except Exception as error:
            self.failed.append((name, error))
        else:
            self.passed.append(name)


class CasesFailed(Exception):
    """Cases of a step failed: the first in full, each other by its first line, then the cases that passed."""

    def __init__(self, failed, passed):
        (case, error), others = failed[0], failed[1:]
        lines = [f"{case}: {_explain(error)}"] + [f"also {case}: {getattr(e, 'verdict', _explain(e).splitlines()[0])}"
                                                  for case, e in others]
        super().__init__("\n".join(lines + ([f"passed: {'; '.join(passed)}"] if passed else [])))


@contextlib.contextmanager
def step(description, cases=()):
    """One graded step: "ok", the cases it covered and any notes the body adds to the list it gets; or "FAIL" and
    why, then Failed (when grading, the check goes on to the next step)."""
    notes = Step()
    try:
        yield notes
        if notes.failed:
            raise CasesFailed(notes.failed, notes.passed)
    except Refused:
        raise                                           # check() says why, once
    except Exception as error:
        print(f"  FAIL  {description}")
        for line in _explain(error).splitlines():
            print(_indented(line))
        Run.steps.append((description, False))
        if not Run.keep_going:
            raise Failed from error
        return
    Run.steps.append((description, True))
    print(f"  ok    {description}", flush=True)
    if cases:
        notes.insert(0, "cases: " + "; ".join(cases))
    for note in notes:
        print(_indented(note))


def _indented(text):
    return textwrap.fill(text, 116, initial_indent=" " * 8, subsequent_indent=" " * 10, break_on_hyphens=False)


def _explain(error):
    """What went wrong, and, for an exception raised in the learner's file, the line it came from, then the notes
    the checker added (what the error points at)."""
    if isinstance(error, (Mismatch, ta.GradcheckError, CasesFailed, runner.Stopped)):
        return str(error)
    if isinstance(error, runner.LearnerError):
        return "\n".join([error.explained] + getattr(error, "__notes__", []))
    text = f"{type(error).__name__}: {error}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_learner_file(f.filename)]
    if frames:
        frame = frames[-1]
        text += f"\n  at {pathlib.Path(frame.filename).name} line {frame.lineno}, in {frame.name}: {frame.line}"
    return "\n".join([text] + getattr(error, "__notes__", []))


class Missing:
    """Stands for a name that the check reads and the learner's file does not give: any use of it raises why."""

    def __init__(self, name, why):
        self.__name__, self._why = name, why

    def __getattr__(self, attribute):
        raise LookupError(self._why)

    def __call__(self, *args, **kwargs):
        raise LookupError(self._why)

    def __mro_entries__(self, bases):               # `class Watched(function)` with this as function
        raise LookupError(self._why)


class Submission:
    """The learner's names (stand-ins for those of a file run in a child process, or a notebook's globals) as the
    check reads them. On its first reading a name must be the learner's own work (why(name) is None), else Refused
    (when grading, it reads as Missing, and _refused says why); a name that is not there reads as Missing. absent:
    why a name is not there, when the file did not load."""

    def __init__(self, namespace, why=lambda name: None, absent=None):
        self._namespace, self._why, self._absent = namespace, why, absent
        self._read, self._refused = {}, []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in self._read:
            self._read[name] = self._own(name)
        return self._read[name]

    def _own(self, name):
        if name not in self._namespace:
            return Missing(name, self._absent or f"your file defines no {name}")
        why = self._why(name)
        if why and not Run.keep_going:
            raise Refused(why)
        if why:
            print(f"  FAIL  your own work\n{_indented(why)}")
            self._refused.append(why)
            return Missing(name, f"refused: {why}")
        return self._namespace[name]


# -- comparing with the reference path -----------------------------------------------------------------------------
def assert_close(what, mine, expected, tolerance=TOLERANCE):
    """mine equals expected to within tolerance (absolute and relative), NaN nowhere the reference has none."""
    mine, expected = _host(mine), _host(expected)
    if mine.shape != expected.shape:
        raise Mismatch(f"{what}: shape {mine.shape}, the reference path's is {expected.shape}")
    if mine.dtype == bool or expected.dtype == bool:
        wrong = mine != expected
        if wrong.any():
            where = tuple(int(i) for i in np.argwhere(wrong)[0])
            raise Mismatch(f"{what} differs at {int(wrong.sum())} of {wrong.size} places, first at {where}: yours "
                           f"{mine[where]}, the expected {expected[where]}")
        return
    nan = np.isnan(mine) & ~np.isnan(expected)
    if nan.any():
        where = tuple(int(i) for i in np.argwhere(nan)[0])
        raise Mismatch(f"{what} is NaN at {int(nan.sum())} of {nan.size} places, first at {where}, where the "
                       f"reference path has {expected[where]:.6g}")
    with np.errstate(invalid="ignore"):                  # inf - inf where both are inf: equal, so 0 below
        error = np.where(mine == expected, 0.0, np.abs(mine - expected)) / (1 + np.abs(np.nan_to_num(expected)))
    error = np.nan_to_num(error, nan=np.inf)
    if error.size and error.max() > tolerance:
        where = np.unravel_index(int(error.argmax()), error.shape)
        where = tuple(int(i) for i in where)
        raise Mismatch(f"{what} differs from the reference path at {where}: yours {mine[where]:.10g}, reference "
                       f"{expected[where]:.10g}; {int((error > tolerance).sum())} of {error.size} entries differ by "
                       f"more than {tolerance:g}")


def _host(x):
    """A Tensor, a NumPy or CuPy array, or a value as a NumPy array."""
    return x.numpy() if isinstance(x, ta.Tensor) else backend.to_host(x)


def _arrays_on_host(recorded):
    """What a Function got and gave, its arrays moved to NumPy (the hints compute on NumPy, on any device); tuples
    and lists come back as tuples, dicts as dicts."""
    if isinstance(recorded, (tuple, list)):
        return tuple(_arrays_on_host(value) for value in recorded)
    if isinstance(recorded, dict):
        return {key: _arrays_on_host(value) for key, value in recorded.items()}
    return backend.to_host(recorded) if backend.is_array(recorded) else recorded


def use(**functions):
    """F.use(**functions): the learner's Functions in their slots; one that the file does not give says why."""
    for function in functions.values():
        if isinstance(function, Missing):
            raise LookupError(function._why)
    return F.use(**functions)


def _tensors(arrays, grad_of):
    return [None if a is None else ta.tensor(a, requires_grad=i in grad_of.values()) for i, a in enumerate(arrays)]


def forward_backward(call, arrays, grad_of, expected_shape=None):
    """call(*tensors) on fresh tensors made from arrays, then backward from a fixed random upstream gradient.
    Returns the output and the gradient of every array named in grad_of (a dict name -> position), by name. An
    output that is not of expected_shape (when given) stops there, naming both shapes: the backward would only fail
    on it with an error about broadcasting."""
    tensors = _tensors(arrays, grad_of)
    out = call(*tensors)
    if expected_shape is not None and tuple(out.shape) != tuple(expected_shape):
        inputs = ", ".join(f"{name} {tuple(arrays[i].shape)}" for name, i in grad_of.items())
        raise Mismatch(f"your forward returned an output of shape {tuple(out.shape)}; it must be "
                       f"{tuple(expected_shape)} (inputs: {inputs})")
    upstream = np.random.default_rng(1).standard_normal(out.shape).astype(out.array.dtype)
    out.backward(ta.tensor(upstream))
    return {"output": out.numpy(), **{f"d{name}": tensors[i].grad.numpy() for name, i in grad_of.items()}}


def runs_forward_and_backward(slot, function, call, arrays, grad_of):
    """The first step of a Function's check: in the slot, the learner's forward returns the reference path's output
    shape, and its backward runs."""
    with ta.reference(), ta.no_grad():
        expected = call(*_tensors(arrays, {})).shape
    with use(**{slot: function}):
        forward_backward(call, arrays, grad_of, expected_shape=expected)


def compare_paths(slot, function, call, arrays, grad_of, diagnose=None):
    """Output and gradients with the learner's Function in the slot against the reference path's: a verdict on each
    (see wrong)."""
    with ta.reference():
        expected = forward_backward(call, arrays, grad_of)
        with use(**{slot: function}):
            mine = forward_backward(call, arrays, grad_of, expected_shape=expected["output"].shape)
    verdicts = {what: _failure(assert_close, what, mine[what], expected[what]) for what in expected}
    if any(verdicts.values()):
        raise wrong(verdicts, _diagnosis(diagnose, slot, function, call, arrays, grad_of, verdicts))


def gradcheck(slot, function, call, arrays, grad_of, diagnose=None):
    """ta.gradcheck in float64 of call with the learner's Function in the slot (call's argument names name the
    inputs in its messages). When it fails, every input is checked on its own, so that the message says which
    gradients are right as well as which are wrong (see wrong)."""
    try:
        _gradcheck(slot, function, call, arrays, grad_of)
    except ta.GradcheckError as error:
        verdicts = {f"d{name}": _failure(_gradcheck, slot, function, call, arrays, {name: i})
                    for name, i in grad_of.items()} if len(grad_of) > 1 else {f"d{next(iter(grad_of))}": str(error)}
        if not any(verdicts.values()):
            raise
        raise wrong(verdicts, _diagnosis(diagnose, slot, function, call, arrays, grad_of, verdicts)) from None


def _gradcheck(slot, function, call, arrays, grad_of):
    with use(**{slot: function}):
        gradcheck_along_directions_first(call, lambda: _tensors(arrays, grad_of))


def gradcheck_along_directions_first(call, tensors):
    """ta.gradcheck of call on tensors(), along a few random directions first: a dozen forwards, where the full
    Jacobian takes two per input element, each a round trip to the learner's process. Only when they fail does the
    full check run, for its message (which entries fail, and how)."""
    try:
        ta.gradcheck(call, tensors(), full_jacobian=False)
    except ta.GradcheckError:
        ta.gradcheck(call, tensors())


def _failure(check, *args):
    """What check(*args) found wrong, as text; None when it passed."""
    try:
        check(*args)
    except Exception as error:
        return _explain(error)
    return None


def _diagnosis(diagnose, slot, function, call, arrays, grad_of, verdicts):
    """The hints of diagnose (lessons/mistakes.py) on what the learner's Function got and gave in this case."""
    if diagnose is None:
        return []
    seen = {}

    class Recorded(function):
        @staticmethod
        def forward(ctx, *args):
            seen["args"], seen["output"] = args, function.forward(ctx, *args)
            return seen["output"]

        @staticmethod
        def backward(ctx, grad):
            seen["upstream"], seen["grads"] = grad, function.backward(ctx, grad)
            return seen["grads"]
    try:
        with F.use(**{slot: Recorded}):
            forward_backward(call, arrays, grad_of)
        return diagnose(_arrays_on_host(seen), {what for what, why in verdicts.items() if why})
    except Exception:        # a hint is a bonus: when the learner's code cannot give one, the verdicts stand alone
        return []


def wrong(verdicts, hints=None):
    """A Mismatch from verdicts (output or gradient name -> None when right, else what is wrong): the wrong and the
    right ones on the first line, with what the first hint says that pattern points at, then each wrong one's
    message, then the other hints (a common mistake the numbers match exactly, say)."""
    bad = [what for what, why in verdicts.items() if why]
    good = [what for what in verdicts if what not in bad]
    hints = list(hints or [])
    verdict = f"{_listed(bad)} wrong" + (f", {_listed(good)} right" if good else "")
    details = [verdicts[what] if verdicts[what].startswith(what) else f"{what}: {verdicts[what]}" for what in bad]
    first = verdict + (f": {hints.pop(0)}" if hints else "")
    error = Mismatch("\n".join([first] + [f"  {line}" for line in details + hints]))
    error.verdict = verdict              # what another case's line repeats
    return error


def _listed(names):
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def assert_stays_float32(slot, function, call, arrays):
    """The learner's forward and backward, called by the engine on float32 arrays, return float32 arrays (the engine
    would quietly cast a float64 gradient back, so each return value is looked at before it does)."""
    returned = []

    class Watched(function):
        @staticmethod
        def backward(ctx, grad):
            grads = function.backward(ctx, grad)
            returned.extend(g for g in (grads if isinstance(grads, tuple) else (grads,)) if g is not None)
            return grads

    tensors = [a if a is None else ta.tensor(a.astype(np.float32) if a.dtype == np.float64 else a,
                                             requires_grad=a.dtype == np.float64) for a in arrays]
    with F.use(**{slot: Watched}):
        out = call(*tensors)
        out.sum().backward()
    dtypes = [out.dtype] + [g.dtype for g in returned]
    if any(d != np.float32 for d in dtypes):
        raise Mismatch(f"float32 inputs gave {'a float64 output' if out.dtype != np.float32 else 'float64 gradients'}"
                       f" (forward {out.dtype}, backward {[str(g.dtype) for g in returned]}): a float64 array or a "
                       f"NumPy float64 scalar got into the math; mix float32 arrays with Python floats only")


# -- training with the learner's Function --------------------------------------------------------------------------
def _gpt(**changes):
    return models.GPT(models.GPTConfig(**{**dict(vocab_size=10, block_size=12, n_layer=2, num_heads=2, d_model=16),
                                          **changes}))


def _gpt_loss(model, step):
    """Next-token loss on counting mod 10 with a stride of 1, 2 or 3: the next digit follows from the last two,
    which attention has to look back for."""
    rng = np.random.default_rng(step)
    sequence = (rng.integers(0, 10, (8, 1)) + rng.integers(1, 4, (8, 1)) * np.arange(13)) % 10
    return model(ta.tensor(sequence[:, :-1]), ta.tensor(sequence[:, 1:]))[1]


def _seq2seq():
    return models.Seq2SeqAttention(models.Seq2SeqConfig(src_vocab=9, tgt_vocab=9, embed_dim=8, hidden=8,
                                                        attention_dim=8))


def _seq2seq_loss(model, step):
    """Copy ragged source strings (lengths 2..5, padded with 0) to the target between BOS 1 and EOS 2."""
    rng = np.random.default_rng(step)
    src = np.zeros((6, 5), dtype=np.int64)
    tgt = np.zeros((6, 7), dtype=np.int64)
    for row, length in enumerate(rng.integers(2, 6, 6)):
        src[row, :length] = rng.integers(3, 9, length)
        tgt[row, :length + 2] = [1, *src[row, :length], 2]
    logits, _ = model(ta.tensor(src), ta.tensor(tgt[:, :-1]))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ta.tensor(tgt[:, 1:].reshape(-1)), ignore_index=0)


MODELS = {  # name -> (build, loss of one training step), each in float64 on the reference path
    "GPT": (_gpt, _gpt_loss),
    "GPT with impl='flash'": (functools.partial(_gpt, impl="flash"), _gpt_loss),
    "GPT with 4 query heads sharing 2 key/value heads": (functools.partial(_gpt, num_heads=4, num_kv_heads=2),
                                                        _gpt_loss),
    "Seq2SeqAttention": (_seq2seq, _seq2seq_loss),
}


def _train(model_name, functions):
    build, loss_of = MODELS[model_name]
    ta.manual_seed(0)
    model = build().double()
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    with ta.reference(), use(**functions):
        for i in range(TRAINING_STEPS):
            loss = loss_of(model, i)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


@functools.lru_cache(maxsize=None)
def _reference_losses(model_name):
    return tuple(_train(model_name, {}))


def train_like_the_reference(model_name, **functions):
    """TRAINING_STEPS of Adam on the model with the learner's Functions plugged in must follow the reference path's
    losses step for step (float64: the same math gives the same numbers)."""
    mine, expected = _train(model_name, functions), _reference_losses(model_name)
    for i, (a, b) in enumerate(zip(mine, expected)):
        if not abs(a - b) <= 1e-7 * abs(b):
            raise Mismatch(f"training {model_name} with your Function: loss {a:.10g} at step {i}, the reference path "
                           f"reaches {b:.10g} (all steps, yours: {' '.join(f'{x:.4f}' for x in mine)})")
    return (f"loss after {TRAINING_STEPS} steps: yours {mine[-1]:.6f}, reference {expected[-1]:.6f} "
            f"(from {expected[0]:.6f})")


def normal(*shape, seed=0, scale=1.0):
    """A float64 array of standard normal values times scale, the same for the same shape and seed."""
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape) * scale


def extreme(rows, columns):
    """Rows of values near +1000 (exp overflows even in float64), near -1000 (exp underflows to 0) and near 0."""
    return normal(rows, columns, scale=3.0) + np.resize([1000.0, 0.0, 0.0, -1000.0], rows)[:, None]


# -- the exercises, in the order of the lessons --------------------------------------------------------------------
@exercise("02", "Bahdanau's additive attention scores, forward and backward", twins=["additive_scores"])
def additive_attention(learner):
    scores = lambda q_proj, k_proj, v: F.additive_scores(q_proj, k_proj, v)
    grad_of = {"q_proj": 0, "k_proj": 1, "v": 2}
    cases = {"B 2, Lq 3, S 4, H 5": (normal(2, 3, 5), normal(2, 4, 5, seed=1), normal(5, seed=2)),
             "a decoder step, Lq 1": (normal(3, 1, 4), normal(3, 6, 4, seed=1), normal(4, seed=2))}
    with step("your AdditiveScores runs forward and backward"):
        runs_forward_and_backward("additive_scores", learner.AdditiveScores, scores, cases["B 2, Lq 3, S 4, H 5"],
                                  grad_of)
    with step("gradcheck in float64 on q_proj, k_proj and v", cases) as each:
        for case, arrays in cases.items():
            with each.case(case):
                gradcheck("additive_scores", learner.AdditiveScores, scores, arrays, grad_of)
    with step("scores and gradients equal the reference path's", cases) as each:
        for case, arrays in cases.items():
            with each.case(case):
                compare_paths("additive_scores", learner.AdditiveScores, scores, arrays, grad_of)
    with step("ragged source lengths 6, 2 and 4: F.additive_attention's context and every gradient equal the "
              "reference path's"):
        mask = np.arange(6) < np.array([6, 2, 4])[:, None]
        context = lambda query, key, value, w_query, w_key, v: F.additive_attention(
            query, key, value, w_query, w_key, v, mask=ta.tensor(mask))[0]
        arrays = (normal(3, 2, 5), normal(3, 6, 4, seed=1), normal(3, 6, 3, seed=2), normal(7, 5, seed=3),
                  normal(7, 4, seed=4), normal(7, seed=5))
        compare_paths("additive_scores", learner.AdditiveScores, context, arrays,
                      {"query": 0, "key": 1, "value": 2, "w_query": 3, "w_key": 4, "v": 5})
    with step("float32 stays float32"):
        assert_stays_float32("additive_scores", learner.AdditiveScores, scores, cases["a decoder step, Lq 1"])
    with step(f"a Seq2SeqAttention trains {TRAINING_STEPS} steps on your scores to the reference path's loss") as notes:
        notes.append(train_like_the_reference("Seq2SeqAttention", additive_scores=learner.AdditiveScores))


@exercise("03", "softmax, forward and backward", twins=["softmax"])
def softmax_backward(learner):
    cases = {f"{shape} over dim {dim}": (shape, dim)
             for shape, dim in [((4, 7), 1), ((2, 3, 5), 0), ((2, 3, 5), 1), ((2, 3, 5), 2), ((6,), 0)]}
    with step("your Softmax runs forward and backward"):
        runs_forward_and_backward("softmax", learner.Softmax, lambda x: F.softmax(x, 1), (normal(3, 5),), {"x": 0})
    with step("gradcheck in float64", cases) as each:
        for case, (shape, dim) in cases.items():
            with each.case(case):
                gradcheck("softmax", learner.Softmax, lambda x: F.softmax(x, dim), (normal(*shape),), {"x": 0},
                          mistakes.softmax)
    with step("outputs and gradients equal the reference path's", cases) as each:
        for case, (shape, dim) in cases.items():
            with each.case(case):
                compare_paths("softmax", learner.Softmax, lambda x: F.softmax(x, dim), (normal(*shape),), {"x": 0},
                              mistakes.softmax)
    with step("rows near +1000 and near -1000 (exp overflows and underflows), a row that is -inf in part and one "
              "that is -inf everywhere: no NaN"):
        x = extreme(4, 6)
        x[1, :3] = x[2] = -np.inf
        compare_paths("softmax", learner.Softmax, lambda x: F.softmax(x, -1), (x,), {"x": 0})
    with step("float32 stays float32"):
        assert_stays_float32("softmax", learner.Softmax, lambda x: F.softmax(x, -1), (normal(3, 4),))
    with step(f"a Seq2SeqAttention (its attention weights are a softmax) trains {TRAINING_STEPS} steps on yours to "
              "the reference path's loss") as notes:
        notes.append(train_like_the_reference("Seq2SeqAttention", softmax=learner.Softmax))


def _sdpa(is_causal, **options):
    return lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                                     **options)


def _seeded(call, seed=0):
    """call with tinyattn's generators seeded first, every time: dropout drops the same weights on every call (for
    gradcheck) and on both paths."""
    @functools.wraps(call)                      # gradcheck names the inputs by call's argument names
    def seeded(*args):
        ta.manual_seed(seed)
        return call(*args)
    return seeded


def _attention_grads(mask):
    """Gradients to compare: q, k, v, and a float mask's."""
    return {"q": 0, "k": 1, "v": 2, **({"mask": 3} if mask is not None and mask.dtype != bool else {})}


def _check_attention(function, cases, enable_gqa, diagnose=None):
    """The steps that scaled dot-product attention's exercises share. cases: description -> (q, k, v, mask,
    is_causal); diagnose: what wrong gradients point at (lessons/mistakes.py)."""
    slot, call = "scaled_dot_product_attention", lambda causal: _sdpa(causal, enable_gqa=enable_gqa)
    with step(f"your {function.__name__} runs forward and backward"):
        q, k, v, _, _ = next(iter(cases.values()))
        try:
            runs_forward_and_backward(slot, function, call(False), (q, k, v), {"q": 0, "k": 1, "v": 2})
        except ValueError as error:                   # a product or a broadcast whose shapes do not fit
            if not enable_gqa:                        # (grouped heads: the learner's own layout, not these shapes)
                error.add_note(mistakes.attention_shapes(q, k, v))
            raise
    with step("gradcheck in float64 on q, k, v and a float mask", cases) as each:
        for case, (q, k, v, mask, causal) in cases.items():
            with each.case(case):
                gradcheck(slot, function, call(causal), (q, k, v, mask), _attention_grads(mask), diagnose)
    with step("output and every gradient equal the reference path's", cases) as each:
        for case, (q, k, v, mask, causal) in cases.items():
            with each.case(case):
                compare_paths(slot, function, call(causal), (q, k, v, mask), _attention_grads(mask), diagnose)
    with step("float32 stays float32"):
        q, k, v, mask, causal = list(cases.values())[-1]
        assert_stays_float32(slot, function, call(causal), (q, k, v, mask))


@exercise("03", "single-head attention, forward and backward", twins=["scaled_dot_product_attention"])
def attention(learner):
    q, k, v = normal(2, 2, 3, 4), normal(2, 2, 5, 4, seed=1), normal(2, 2, 5, 3, seed=2)
    no_key_for_row_1 = np.ones((3, 5), dtype=bool)
    no_key_for_row_1[1] = False
    cases = {"no mask": (q, k, v, None, False),
             "k and v (1, 2, 5, .) broadcast over q's batch": (q, k[:1], normal(1, 2, 5, 6), None, False),
             "is_causal, 3 queries and 5 keys": (q, k, v, None, True),
             "padding mask (2, 1, 1, 5), lengths 5 and 2": (q, k, v, _padding([5, 2], 5), False),
             "a query whose every key is masked": (q, k, v, no_key_for_row_1, False),
             "a learned float mask (3, 5)": (q, k, v, normal(3, 5, seed=3), False)}
    _check_attention(learner.Attention, cases, enable_gqa=False, diagnose=mistakes.attention)
    dropped = {"no mask": (q, k, v, None), "a learned float mask (3, 5)": (q, k, v, normal(3, 5, seed=3))}
    with step("dropout 0.3 (the same seed on both paths): gradcheck, output and every gradient", dropped) as each:
        call = _seeded(_sdpa(False, dropout_p=0.3))
        for case, arrays in dropped.items():
            with each.case(case):
                gradcheck("scaled_dot_product_attention", learner.Attention, call, arrays, _attention_grads(arrays[3]),
                          mistakes.attention_dropout)
                compare_paths("scaled_dot_product_attention", learner.Attention, call, arrays,
                              _attention_grads(arrays[3]), mistakes.attention_dropout)
    with step(f"a GPT trains {TRAINING_STEPS} steps on your attention to the reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT", scaled_dot_product_attention=learner.Attention))


def _padding(lengths, key_len):
    """(B, 1, 1, key_len): True before each sequence's length."""
    return (np.arange(key_len) < np.array(lengths)[:, None])[:, None, None, :]


@exercise("03", "the causal mask, and padding", twins=["tinyattn.functional.attention_inputs:causal_mask"])
def causal_mask(learner):
    shapes = [(5, 5, 0), (3, 7, 0), (7, 3, 0), (3, 7, 4), (1, 6, 5)]
    with step("causal_mask(query_len, key_len, offset) equals the library's",
              [f"causal_mask{shape}" for shape in shapes]):
        for query_len, key_len, offset in shapes:
            assert_close(f"causal_mask{(query_len, key_len, offset)}", learner.causal_mask(query_len, key_len, offset),
                         F.causal_mask(query_len, key_len, np, offset))
    q, k, v = (ta.tensor(normal(3, 2, 5, 4, seed=seed)) for seed in range(3))
    attend = lambda q, k, v, mask=None, is_causal=False: F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else ta.tensor(mask), is_causal=is_causal).numpy()
    with ta.reference():
        with step("attention with your causal_mask(5, 5) is attention with is_causal=True"):
            assert_close("output", attend(q, k, v, learner.causal_mask(5, 5)), attend(q, k, v, is_causal=True))
        with step("a KV cache: the last 2 of 5 queries with causal_mask(2, 5, 3) attend as in full causal attention"):
            assert_close("output", attend(q[:, :, 3:], k, v, learner.causal_mask(2, 5, 3)),
                         attend(q, k, v, is_causal=True)[:, :, 3:])
        lengths = [5, 2, 3]
        with step("padding_mask([5, 2, 3], 5): shape (3, 1, 1, 5), True before each sequence's length"):
            assert_close("padding_mask", learner.padding_mask(np.array(lengths), 5), _padding(lengths, 5))
        with step("ragged lengths 5, 2, 3: with causal_mask & padding_mask, each padded sequence attends exactly as "
                  "itself cut to its length"):
            padded = attend(q, k, v, learner.causal_mask(5, 5) & learner.padding_mask(np.array(lengths), 5))
            for b, n in enumerate(lengths):
                alone = attend(q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n], is_causal=True)
                assert_close(f"sequence {b} (length {n})", padded[b:b + 1, :, :n], alone)


@exercise("04", "the online softmax", twins=["softmax"])
def online_softmax(learner):
    stream = lambda x, block_size: (x[..., j:j + block_size] for j in range(0, x.shape[-1], block_size))
    row_sums = lambda x: np.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)
    x = normal(4, 10, scale=3.0)
    with step("running_max_and_sum over blocks of 3 columns of a (4, 10) input: m = the row max, "
              "l = sum exp(x - m)"):
        m, l = learner.running_max_and_sum(stream(x, 3))
        assert_close("m", m, x.max(axis=1, keepdims=True))
        assert_close("l", l, row_sums(x))
    sizes = (1, 3, 4, 10, 16)
    with ta.reference():
        with step("online_softmax of x (2, 3, 10) equals the reference softmax", [f"blocks of {b}" for b in sizes]):
            x = normal(2, 3, 10, scale=3.0)
            for block_size in sizes:
                assert_close(f"online_softmax, blocks of {block_size}", learner.online_softmax(x, block_size),
                             F.softmax(ta.tensor(x), -1))
        with step("rows near +1000 and near -1000, a row whose first two blocks are -inf, a row of -inf "
                  "everywhere: no NaN"):
            x = extreme(4, 10)
            x[1, :6] = x[2] = -np.inf
            assert_close("online_softmax, blocks of 3", learner.online_softmax(x, 3), F.softmax(ta.tensor(x), -1))
            m, l = learner.running_max_and_sum(stream(x, 3))
            assert_close("m", m, x.max(axis=1, keepdims=True))
            finite = [0, 1, 3]
            assert_close("l of the rows with a finite value", l[finite], row_sums(x[finite]))
            assert_close("l of the row of -inf", l[2], np.zeros(1))


def _flash(is_causal, enable_gqa, block_size):
    return lambda q, k, v, mask=None: F.flash_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                        enable_gqa=enable_gqa, block_size=block_size, fused=False)


def _with_block_size(function, block_size):
    """function with its blocks made block_size long, whatever the caller asks: the models call flash attention
    with the blocks it picks (cpu.attention_block: 256, or 124 at head size 64), longer than their sequences."""
    class SmallBlocks(function):
        @staticmethod
        def forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, _):
            return function.forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, block_size)
    return SmallBlocks


def _check_flash(function):
    """flash_forward and flash_backward: each leaves one half to the library, so both are graded as a whole."""
    q, k, v = normal(2, 2, 5, 3), normal(2, 2, 7, 3, seed=1), normal(2, 2, 7, 4, seed=2)
    cases = {  # (q, k, v, mask, is_causal, enable_gqa, block_size)
        "no mask, 5 queries and 7 keys in blocks of 2": (q, k, v, None, False, False, 2),
        "is_causal, blocks of 2": (q, k, v, None, True, False, 2),
        "is_causal, 7 queries and keys, blocks of 3": (normal(2, 2, 7, 3, seed=3), k, v, None, True, False, 3),
        "padding mask, lengths 7 and 0: every key masked": (q, k, v, _padding([7, 0], 7), False, False, 3),
        "4 query heads sharing 2 key/value heads, is_causal": (normal(2, 4, 5, 3, seed=4), k, v, None,
                                                                         True, True, 2),
        "a float mask (5, 7), blocks of 4": (q, k, v, normal(5, 7, seed=5), False, False, 4)}
    grad_of = {"q": 0, "k": 1, "v": 2}
    with step("your FlashAttention runs forward and backward"):
        runs_forward_and_backward("flash_attention", function, _flash(False, False, 2), (q, k, v), grad_of)
    with step("gradcheck in float64 on q, k, v", cases) as each:
        for case, (q, k, v, mask, *options) in cases.items():
            with each.case(case):
                gradcheck("flash_attention", function, _flash(*options), (q, k, v, mask), grad_of,
                          mistakes.attention_pattern)
    with step("output and dq, dk, dv equal the reference path's", cases) as each:
        for case, (q, k, v, mask, *options) in cases.items():
            with each.case(case):
                compare_paths("flash_attention", function, _flash(*options), (q, k, v, mask), grad_of,
                              mistakes.attention_pattern)
    with step("float32 stays float32"):
        q, k, v, mask, *options = cases["is_causal, blocks of 2"]
        assert_stays_float32("flash_attention", function, _flash(*options), (q, k, v, mask))
    with step(f"a GPT with impl='flash' trains {TRAINING_STEPS} steps on yours (blocks of 5, ragged) to the "
              "reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT with impl='flash'", flash_attention=_with_block_size(function, 5)))


@exercise("04", "flash attention's forward", given=["FlashAttention.backward"])
def flash_forward(learner):
    _check_flash(learner.FlashAttention)


@exercise("04", "flash attention's backward", given=["FlashAttention.forward"])
def flash_backward(learner):
    _check_flash(learner.FlashAttention)


@exercise("05", "LayerNorm, forward and backward", twins=["layer_norm"])
def layer_norm_backward(learner):
    norm = lambda shape: lambda x, weight=None, bias=None: F.layer_norm(x, shape, weight, bias)
    cases = {"rows of 4 with weight and bias": (norm(4), normal(3, 4), normal(4, seed=1),
                                                          normal(4, seed=2)),
             "normalized over the last two dims (3, 4)": (norm((3, 4)), normal(2, 3, 4),
                                                                    normal(3, 4, seed=1), normal(3, 4, seed=2)),
             "no weight and no bias": (norm(5), normal(2, 3, 5)),
             "rows of equal values (variance 0)": (norm(4), np.ones((2, 4)), normal(4, seed=1), normal(4, seed=2))}
    grads = lambda arrays: {name: i for i, name in enumerate(("x", "weight", "bias")[:len(arrays)])}
    with step("your LayerNorm runs forward and backward"):
        call, *arrays = cases["rows of 4 with weight and bias"]
        runs_forward_and_backward("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("gradcheck in float64 on x, weight and bias", cases) as each:
        for case, (call, *arrays) in cases.items():
            with each.case(case):
                gradcheck("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("output and gradients equal the reference path's", cases) as each:
        for case, (call, *arrays) in cases.items():
            with each.case(case):
                compare_paths("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("float32 stays float32"):
        call, *arrays = cases["rows of 4 with weight and bias"]
        assert_stays_float32("layer_norm", learner.LayerNorm, call, arrays)
    with step(f"a GPT trains {TRAINING_STEPS} steps on your LayerNorm to the reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT", layer_norm=learner.LayerNorm))


@exercise("07", "grouped-query attention: query heads sharing key/value heads",
          twins=["scaled_dot_product_attention"])
def grouped_query(learner):
    q, k, v = normal(2, 4, 3, 4), normal(2, 2, 5, 4, seed=1), normal(2, 2, 5, 3, seed=2)
    cases = {"4 query heads over 2 key/value heads": (q, k, v, None, False),
             "multi-query: 4 over 1, is_causal": (q, k[:, :1], v[:, :1], None, True),
             "a learned float mask per query head (4, 3, 5)": (q, k, v, normal(4, 3, 5, seed=3), False),
             "no sharing: 2 query heads over 2, is_causal": (q[:, :2], k, v, None, True),
             "padding mask (2, 1, 1, 5), lengths 5 and 2": (q, k, v, _padding([5, 2], 5), False)}
    _check_attention(learner.GroupedQueryAttention, cases, enable_gqa=True)
    with step(f"a GPT with 4 query heads over 2 key/value heads trains {TRAINING_STEPS} steps on yours to the "
              "reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT with 4 query heads sharing 2 key/value heads",
                                              scaled_dot_product_attention=learner.GroupedQueryAttention))


@exercise("07", "rotary position embedding (RoPE)")
def rotary(learner):
    tables = lambda length, dim, offset=0: tuple(ta.tensor(t) for t in learner.rotary_tables(length, dim, offset))
    with step("rotary_tables(6, 8, offset=3): nn.RotaryEmbedding's cos and sin for positions 3 to 8"):
        module = nn.RotaryEmbedding(8, max_len=32)
        cos, sin = learner.rotary_tables(6, 8, 3)
        assert_close("cos", cos, module.cos.numpy()[3:9])
        assert_close("sin", sin, module.sin.numpy()[3:9])
    with step("your Rotate runs forward and backward"):
        forward_backward(lambda x: learner.Rotate.apply(x, *tables(6, 8)), (normal(2, 6, 8),), {"x": 0},
                         expected_shape=(2, 6, 8))
    with step("gradcheck in float64 on x (2, 3, 5, 8)"):
        cos, sin = tables(5, 8)
        gradcheck_along_directions_first(lambda x: learner.Rotate.apply(x, cos, sin),
                                         lambda: (ta.tensor(normal(2, 3, 5, 8), requires_grad=True),))
    cases = {"x (2, 3, 6, 8)": (8, 0), "x (2, 3, 6, 8) at offset 5": (8, 5), "head_dim 4 at offset 2": (4, 2)}
    with step("equals nn.RotaryEmbedding", cases):
        for case, (dim, offset) in cases.items():
            x = ta.tensor(normal(2, 3, 6, dim))
            assert_close(case, learner.Rotate.apply(x, *tables(6, dim, offset)),
                         nn.RotaryEmbedding(dim, max_len=32)(x, offset))
    with step("a rotation: every pair keeps its length"):
        x = normal(10, 8)
        y = learner.Rotate.apply(ta.tensor(x), *tables(10, 8)).numpy()
        assert_close("|pair| after", np.hypot(y[:, :4], y[:, 4:]), np.hypot(x[:, :4], x[:, 4:]))
    with step("relative positions: q at m . k at n depends on the positions only through m - n "
              "(m - n = 2 at m = 2, 7 and 13)"):
        cos, sin = tables(16, 8)
        rotated = lambda x: learner.Rotate.apply(ta.tensor(np.repeat(x[None], 16, axis=0)), cos, sin).numpy()
        q, k = rotated(normal(8)), rotated(normal(8, seed=1))
        dots = [float(q[m] @ k[m - 2]) for m in (2, 7, 13)]
        assert_close("q_m . k_(m-2) for m = 7 and 13", np.array(dots[1:]), np.array(dots[:1] * 2))
    with step("float32 stays float32"):
        x = ta.tensor(normal(2, 6, 8).astype(np.float32), requires_grad=True)
        y = learner.Rotate.apply(x, *(t.float() for t in tables(6, 8)))
        if y.dtype != np.float32:
            raise Mismatch(f"float32 input and tables gave a {y.dtype} output")


@exercise("08", "cross-entropy with label smoothing, forward and backward", twins=["cross_entropy"])
def label_smoothing(learner):
    target = np.array([0, 3, -100, 2, 4])                     # row 2 is ignored (ignore_index -100)

    def loss(reduction, eps, target=target):
        return lambda logits: F.cross_entropy(logits, ta.tensor(target), reduction=reduction, label_smoothing=eps)
    logits = normal(5, 6)
    cases = {f"{reduction}, label smoothing {eps}": (reduction, eps)
             for reduction in ("mean", "sum", "none") for eps in (0.0, 0.1, 0.3)}
    with step("your CrossEntropy runs forward and backward"):
        runs_forward_and_backward("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (logits,), {"logits": 0})
    with step("gradcheck in float64, with a row that ignore_index leaves out", cases) as each:
        for case, options in cases.items():
            with each.case(case):
                gradcheck("cross_entropy", learner.CrossEntropy, loss(*options), (logits,), {"logits": 0})
    with step("loss and gradient equal the reference path's", cases) as each:
        for case, options in cases.items():
            with each.case(case):
                compare_paths("cross_entropy", learner.CrossEntropy, loss(*options), (logits,), {"logits": 0})
    with step("rows of logits near +1000 and near -1000, and a batch whose every row is ignored (mean 0, "
              "gradient 0)"):
        compare_paths("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (extreme(5, 6),), {"logits": 0})
        compare_paths("cross_entropy", learner.CrossEntropy, loss("mean", 0.1, np.full(5, -100)), (logits,),
                      {"logits": 0}, "every row ignored")
    with step("float32 stays float32"):
        assert_stays_float32("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (logits,))
    with step(f"a GPT trains {TRAINING_STEPS} steps on your loss to the reference path's") as notes:
        notes.append(train_like_the_reference("GPT", cross_entropy=learner.CrossEntropy))


def _causal_weights(layers, batch, heads, length, seed):
    """Random causal attention weights, rows summing to 1: a list over layers of (B, H, T, T)."""
    scores = np.where(np.tri(length, dtype=bool), normal(layers, batch, heads, length, length, seed=seed, scale=2.0),
                      -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return list(weights / weights.sum(axis=-1, keepdims=True))


def _repeated(batch, period, seed):
    """(B, 2 * period) token ids: period distinct random tokens of 50, repeated once."""
    rng = np.random.default_rng(seed)
    return np.tile(np.stack([rng.permutation(50)[:period] for _ in range(batch)]), 2)


@exercise("20", "the induction score from recorded attention weights",
          twins=["tinyattn.interpret.head_scores:induction_score"])
def induction_score(learner):
    period = 5
    tokens = _repeated(2, period, seed=0)
    one_head = lambda target: np.stack([np.eye(2 * period)[[target(i) if i >= period else i for i in
                                                            range(2 * period)]]] * 2)[:, None]        # (B, 1, T, T)
    induction, previous = one_head(lambda i: i - period + 1), one_head(lambda i: i - 1)
    with step(f"a random sequence of {period} tokens repeated once: a head that attends to the token after the "
              "first copy scores 1, one that attends to the previous token 0"):
        assert_close("induction_score([[induction, previous]])", learner.induction_score(
            [np.concatenate([induction, previous], axis=1)], tokens), np.array([[1.0, 0.0]]))
    cases = {"a sequence of 5 distinct tokens repeated once": _repeated(2, 5, seed=1),
             "tokens 0 to 3 (many repeats, several copies)": np.random.default_rng(2).integers(0, 4, (3, 10)),
             "no token repeated in the first sequence": np.stack([np.arange(8), np.arange(8) % 3])}
    with step("induction_targets(tokens): True at [b, i, j + 1] for every j < i with the same token", cases) as each:
        for case, ids in cases.items():
            with each.case(case):
                expected = np.zeros(ids.shape + ids.shape[1:], dtype=bool)
                for b, i, j in np.ndindex(expected.shape):
                    expected[b, i, j] = j >= 1 and j - 1 < i and ids[b, j - 1] == ids[b, i]
                assert_close(f"induction_targets, {case}", learner.induction_targets(ids), expected)
    with step("induction_score equals tinyattn.interpret.induction_score on random causal weights of 2 layers, "
              "3 heads", cases) as each:
        for seed, (case, ids) in enumerate(cases.items()):
            with each.case(case):
                weights = _causal_weights(2, ids.shape[0], 3, ids.shape[1], seed)
                assert_close(f"induction_score, {case}", learner.induction_score(weights, ids),
                             interpret.induction_score(weights, ids))
    with step("on the weights of a 2-layer attention-only GPT recorded with interpret.record, on 4 random sequences "
              "of 7 tokens repeated once"):
        ta.manual_seed(0)
        model = models.GPT(models.GPTConfig(vocab_size=50, block_size=16, n_layer=2, num_heads=4, d_model=32,
                                            mlp="none")).double().eval()
        ids = _repeated(4, 7, seed=3)
        with ta.no_grad(), interpret.record(model) as cache:
            model(ta.tensor(ids))
        weights = [w.numpy() for w in cache.attention.values()]
        assert_close("induction_score", learner.induction_score(weights, ids), interpret.induction_score(weights, ids))


# -- the commands --------------------------------------------------------------------------------------------------
def list_exercises():
    print(f"{'exercise':22}{'lesson':8}{'status':22}what")
    for item in _exercises.values():
        path = EXERCISES / f"{item.name}.py"
        left = todos_left(path) if path.exists() else None
        status = ("file missing" if left is None else f"{left} TODO{'s' * (left != 1)} left" if left else
                  "written: check it")
        print(f"{item.name:22}{item.lesson:8}{status:22}{item.title}")
    answer = ", --solution for the answer" if (EXERCISES / "solutions").is_dir() else ""
    print(f"\ngrade one: python -m lessons check NAME   (--file PATH for another copy{answer})"
          "\ngrade all: python -m lessons check all    (--dir DIR for a student's folder, --json for a grade book)")
    return 0


def check(name, path, keep_going=False, text=None, timeout=runner.TIMEOUT):
    """Grade the file at path (a .py file or a notebook) as exercise name, run in a child process of its own with a
    time limit of timeout seconds (lessons/checking/runner.py). text: the file's bytes, read before any child
    started (or the OSError reading it raised); None reads them now. A learner's check stops at the first step that
    fails; keep_going (a grade) runs every step. Returns the result: passed, each step's verdict, and the score, the
    share of the exercise's steps passed (loading the file earns nothing)."""
    item, learner = _exercises[name], None
    text = read_submission(path) if text is None else text

    def submission():
        nonlocal learner
        if isinstance(text, OSError):
            raise text
        learner = runner.Learner(path.name, text, item.given, item.twins, path.resolve().is_relative_to(
            EXERCISES / "solutions"), keep_going, timeout)
        namespace, why = learner.names()
        return Submission(namespace, why.get)

    def finish():
        return (learner.output(), learner.refused) if learner else ([], None)
    return _grade(name, _shown(path), submission, keep_going, finish)


def read_submission(path):
    """The bytes of the file at path, or the OSError reading it raised (graded as a file that does not load)."""
    try:
        return path.read_bytes()
    except OSError as error:
        return error


def check_notebook(name, namespace):
    """Grade exercise name on a notebook's own code, from its last cell: check_notebook("attention", globals()). The
    same steps as `python -m lessons check NAME`, but in the notebook's own process (its code is already running
    there); an error in the learner's code names its cell's line."""
    say_where_tinyattn_is()
    for value in namespace.values():
        for function in _functions_of(value):
            _learner_files.add(pathlib.Path(function.__code__.co_filename).resolve())
    given = _exercises[name].given
    _grade(name, "this notebook's code",
           lambda: Submission(namespace, lambda n: borrowed(n, namespace[n], given)))


def _functions_of(value):
    """The functions a notebook's name holds: itself, or a class's forward and backward, where they are code."""
    candidates = [value] if inspect.isfunction(value) else \
        [getattr(value, m, None) for m in ("forward", "backward")] if inspect.isclass(value) else []
    return [f for f in candidates if inspect.isfunction(f)]


def _grade(name, shown, submission, keep_going=False, finish=lambda: ([], None)):
    """check's steps, on the Submission that submission() gives (a child's stand-ins, a notebook's names); finish()
    ends the submission's run: what it printed, and why it was refused while it ran (None: it was not)."""
    item = _exercises[name]
    print(f"exercise {name} (lesson {item.lesson}): {item.title}\ngrading {shown}")
    Run.keep_going, Run.steps = keep_going, []
    learner, result = None, {"exercise": name, "lesson": item.lesson, "file": shown, "passed": False}
    refused = []
    try:
        with step("your file loads"):
            learner = submission()
        Run.steps = []
        item.check(learner or Submission({}, absent="your file did not load (step 'your file loads')"))
        result["passed"] = learner is not None and not learner._refused and all(ok for _, ok in Run.steps)
    except Refused as error:
        print(f"  FAIL  your own work\n{_indented(str(error))}")
        refused.append(str(error))
    except Failed:
        pass
    output, refused_while_running = finish()
    if learner is not None:
        refused += learner._refused
    if refused_while_running and refused_while_running not in refused:
        print(f"  FAIL  your own work\n{_indented(refused_while_running)}")
        refused.append(refused_while_running)
    if refused:
        result.update(passed=False, refused=refused)
    if output:
        print("  your code printed:\n" + "\n".join(f"    | {line}" for line in output))
    passed = sum(ok for _, ok in Run.steps)
    result.update(steps_passed=passed, steps_total=len(Run.steps),
                  score=round(passed / len(Run.steps), 4) if Run.steps else 0.0,
                  steps=[{"step": description, "passed": ok} for description, ok in Run.steps])
    verdict = "PASSED every step" if result["passed"] else "REFUSED" if "refused" in result else "FAILED"
    print(f"{name}: {verdict}." + ("" if result["passed"] or keep_going else
                                  " Fix what the message points at, then run the check again."))
    return result


def summary(results):
    """The table of a grade: each exercise's steps passed and result, then the totals."""
    print(f"\n{'exercise':22}{'lesson':8}{'steps':8}{'score':8}result")
    for r in results:
        result = "passed" if r["passed"] else "refused" if "refused" in r else "failed"
        print(f"{r['exercise']:22}{r['lesson']:8}{r['steps_passed']}/{r['steps_total']:<6}{r['score']:<8.2f}{result}")
    passed = sum(r["passed"] for r in results)
    print(f"{passed} of {len(results)} exercises passed; score {_score(results):.2f} (the mean of the exercises' "
          "scores, each the share of its steps passed)")


def _score(results):
    return round(sum(r["score"] for r in results) / len(results), 4)


def say_where_tinyattn_is():
    """The first line: the folder tinyattn was imported from, and a warning when it is not this repository's."""
    print(f"tinyattn {ta.__version__} imported from {lesson.PACKAGE}")
    warning = lesson.another_clone(__file__)
    if warning:
        print(warning)


def write_notebooks(argv):
    """`exercises --notebook [--out DIR] [NAME ...]`: each exercise (or those named) as NAME.ipynb in DIR."""
    parser = argparse.ArgumentParser(prog="python -m lessons exercises --notebook",
                                     description="write exercises as notebooks, graded by their last cell")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"some of {', '.join(_exercises)} (default: all)")
    parser.add_argument("--out", help="the folder to write them to (default: the current folder)")
    parser.add_argument("--force", action="store_true", help="overwrite notebooks already there (worked ones too)")
    args = parser.parse_args([a for a in argv if a != "--notebook"])
    unknown = [name for name in args.names if name not in _exercises]
    if unknown:
        parser.error(f"no exercise {unknown[0]!r}; the exercises are {', '.join(_exercises)}")
    names = args.names or list(_exercises)
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out} is a file: name a folder to write the notebooks into")
    there = [path for path in (notebook_path(EXERCISES / f"{name}.py", args.out) for name in names)
             if os.path.exists(path)]
    if there and not args.force:
        parser.exit(1, f"not written: {', '.join(there)} exist{'s' * (len(there) == 1)} (worked notebooks?) and "
                       f"{'are' if len(there) > 1 else 'is'} kept; --force overwrites, --out DIR writes elsewhere\n")
    for name in names:
        print(f"wrote {write_notebook(EXERCISES / f'{name}.py', args.out, exercise_notebook, force=True)}")
    print(f"open one in Jupyter, fill in its TODOs and run its last cell; or grade it with "
          f"python -m lessons check NAME --file NAME.ipynb")
    return 0


def _submitted(folder, name):
    """folder/NAME.py, or the notebook folder/NAME.ipynb when only it is there."""
    notebook = folder / f"{name}.ipynb"
    return notebook if notebook.exists() and not (folder / f"{name}.py").exists() else folder / f"{name}.py"


def main(argv):
    """`exercises [--notebook ...]`, or `check NAME|all [--file PATH | --solution | --dir DIR] [--json]`; returns
    the exit code."""
    if argv[:1] == ["exercises"]:
        say_where_tinyattn_is()
        return write_notebooks(argv[1:]) if "--notebook" in argv else list_exercises()
    parser = argparse.ArgumentParser(prog="python -m lessons check", description="grade an exercise, or all of them")
    parser.add_argument("name", choices=sorted(_exercises) + ["all"], metavar="NAME",
                        help=f"one of {', '.join(_exercises)}; or all")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--file", type=pathlib.Path, help="grade this copy instead of lessons/exercises/NAME.py")
    where.add_argument("--dir", type=pathlib.Path, help="grade DIR/NAME.py, or DIR/NAME.ipynb (a student's folder)")
    where.add_argument("--solution", action="store_true", help="grade the bundled solution")
    parser.add_argument("--json", action="store_true", help="every step runs; the results go to stdout as JSON (for "
                                                            "a grade book), the steps to stderr")
    parser.add_argument("--timeout", type=float, default=runner.TIMEOUT, metavar="SECONDS",
                        help=f"how long each submission may compute, in all (default {runner.TIMEOUT:g})")
    args = parser.parse_args(argv[1:])
    if args.file and (args.file.is_dir() or args.file.suffix not in (".py", ".ipynb")):
        parser.error(f"--file {args.file}: not a .py file or a notebook (.ipynb)")
    if args.timeout <= 0:
        parser.error(f"--timeout {args.timeout:g}: must be more than 0 seconds")
    if args.dir and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: no such folder")
    if args.solution and not (EXERCISES / "solutions").is_dir():
        parser.error("--solution: this copy has no lessons/exercises/solutions/ (a student copy)")
    names = list(_exercises) if args.name == "all" else [args.name]
    if args.file and len(names) > 1:
        parser.error("--file grades one exercise: name it, or give a folder with --dir")
    folder = args.dir or EXERCISES / ("solutions" if args.solution else "")
    paths = {name: args.file or _submitted(folder, name) for name in names}
    texts = {name: read_submission(path) for name, path in paths.items()}      # all of them before any runs
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        say_where_tinyattn_is()
        results = [check(name, paths[name], args.json or len(names) > 1, texts[name], args.timeout)
                   for name in names]
        if len(names) > 1:
            summary(results)
    if args.json:
        print(json.dumps({"tinyattn": lesson.PACKAGE, "passed": sum(r["passed"] for r in results),
                          "exercises_total": len(results), "score": _score(results), "exercises": results}, indent=1))
    return 0 if all(r["passed"] for r in results) else 1
