"""The exercises' registry: each check function under its exercise's name, with its lesson, its title, the methods
the exercise hands over and the library's versions of its answer."""
from dataclasses import dataclass


@dataclass
class Exercise:
    name: str
    lesson: str
    title: str
    check: callable
    given: tuple = ()
    twins: tuple = ()


registered = {}


def exercise(lesson, title, given=(), twins=()):
    """Register a check function under its own name, which is also its file's name in lessons/exercises/. given:
    the methods the exercise hands over from the library ("FlashAttention.backward"); every other forward and
    backward that the check reads from the learner's file must be the learner's own. twins: the library's versions
    of the answer (a public function with twins, "softmax", or "module:function"), which the child running the
    learner's file replaces with stand-ins that refuse the submission when called."""
    def register(check):
        registered[check.__name__] = Exercise(check.__name__, lesson, title, check, tuple(given), tuple(twins))
        return check
    return register
