"""Running a check's steps: each step prints "ok" and its notes, or "FAIL" and why (an exception of the learner's
with the line it came from, a mismatch, gradcheck's message, why the learner's process stopped)."""
import contextlib
import pathlib
import textwrap
import traceback

import tinyattn as ta
from lessons.checking import runner
from lessons.checking.learners_file import Refused, is_learner_file


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
        lines = [f"{case}: {explain(error)}"] + [f"also {case}: {getattr(e, 'verdict', explain(e).splitlines()[0])}"
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
        for line in explain(error).splitlines():
            print(indented(line))
        Run.steps.append((description, False))
        if not Run.keep_going:
            raise Failed from error
        return
    Run.steps.append((description, True))
    print(f"  ok    {description}", flush=True)
    if cases:
        notes.insert(0, "cases: " + "; ".join(cases))
    for note in notes:
        print(indented(note))


def indented(text):
    return textwrap.fill(text, 116, initial_indent=" " * 8, subsequent_indent=" " * 10, break_on_hyphens=False)


def explain(error):
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
