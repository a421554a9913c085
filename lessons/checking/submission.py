"""The learner's names as a check reads them: each must be the learner's own work, and a name the file does not give
stands for itself with why."""
from lessons.checking.learners_file import Refused
from lessons.checking.steps import Run, indented


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
            print(f"  FAIL  your own work\n{indented(why)}")
            self._refused.append(why)
            return Missing(name, f"refused: {why}")
        return self._namespace[name]
