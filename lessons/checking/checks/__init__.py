"""Each exercise's check, in a file of its own named as the exercise (lessons/exercises/NAME.py is graded by
checks/NAME.py's function NAME). A new check is a new file here: the registry (lessons/checking/registry.py) finds it
by listing this folder. What several checks share is in lessons/checking/shared.py."""
from dataclasses import dataclass


@dataclass
class Exercise:
    name: str
    lesson: str
    title: str
    check: callable
    given: tuple = ()
    twins: tuple = ()
    place: int = 1


def exercise(lesson, title, given=(), twins=(), place=1):
    """Mark a check function as its exercise's check, named as its file and as the exercise's file in
    lessons/exercises/. given: the methods the exercise hands over from the library ("FlashAttention.backward");
    every other forward and backward that the check reads from the learner's file must be the learner's own. twins:
    the library's versions of the answer (a public function with twins, "softmax", or "module:function"), which the
    child running the learner's file replaces with stand-ins that refuse the submission when called. place: its
    place among its lesson's exercises, in the order the lesson teaches them."""
    def mark(check):
        check.exercise = Exercise(check.__name__, lesson, title, check, tuple(given), tuple(twins), place)
        return check
    return mark
