"""Finding and loading the learner's file, and refusing borrowed code by how it reads: what the grader's child
needs, and what a lesson needs to run on the learner's own Function (learners_or_bundled)."""
import importlib.util
import inspect
import linecache
import pathlib
import sys
import types
import warnings

import tinyattn as ta
from lessons.notebook import notebook_code

PACKAGE = pathlib.Path(ta.__file__).resolve().parent         # the library (not tinyattn.lesson's: its
#                                                             import of the figures costs every child a second)
LESSONS = pathlib.Path(__file__).resolve().parents[1]
EXERCISES = LESSONS / "exercises"
SOLUTIONS = EXERCISES / "solutions"
TODO = 'raise NotImplementedError("not implemented yet")'

_learner_files = set()


class Refused(Exception):
    """The learner's file hands in the library's code, or a bundled solution's, as its own."""


def add_learner_file(filename):
    """Count filename (a file's, or a notebook cell's "NAME.ipynb, cell N") as the learner's in tracebacks."""
    _learner_files.add(pathlib.Path(filename).resolve())


def is_learner_file(filename):
    """Whether filename (a traceback frame's) is a file, or a notebook's cell, that load() loaded."""
    return pathlib.Path(filename).resolve() in _learner_files


def load(path):
    """The learner's file as a module, with the repository root on the path as for a lesson, so that
    `lessons.exercises.given` imports wherever the file is. A notebook (.ipynb) runs its code cells in order but the
    one that grades; an error in one names it as "NAME.ipynb, cell N"."""
    if str(LESSONS.parent) not in sys.path:
        sys.path.insert(0, str(LESSONS.parent))
    if path.suffix == ".ipynb":
        module = types.ModuleType(f"exercise_{path.stem}")
        module.__file__ = str(path)
        for number, code in notebook_code(path):
            cell = f"{path}, cell {number}"
            add_learner_file(cell)
            linecache.cache[cell] = (len(code), None, code.splitlines(keepends=True), cell)   # lines for tracebacks
            exec(compile(code, cell, "exec"), vars(module))
        return module
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"{path} is not a .py file or a notebook (.ipynb): the grader loads only those")
    add_learner_file(path)
    spec = importlib.util.spec_from_file_location(f"exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def borrowed(name, value, given=(), solution=False):
    """Why value, the learner's `name`, is not the learner's own work; None when it is. A Function's forward and
    backward (but those in given), or a function, must not be code of the library or of solutions/ (a re-export, a
    subclass that keeps its parent's methods) and must not call a Function of the library's, the library's function
    of its own name, or anything of the solutions' (a wrapper). solution: the file graded is a bundled solution,
    whose neighbours it may use."""
    if isinstance(value, type) and issubclass(value, ta.Function):
        methods = [(f"{name}.{m}", getattr(value, m)) for m in ("forward", "backward") if f"{name}.{m}" not in given]
    elif inspect.isfunction(value):
        methods = [(name, value)]
    else:
        return None
    for label, method in methods:
        code = getattr(method, "__code__", None)
        origin = _foreign(code.co_filename, solution) if code else "no Python code"
        if origin:
            return f"{label} is the code of {origin}, not yours: a submission writes its own"
        called = _foreign_calls(method, solution)
        if called:
            return f"{label} calls {called}: a submission computes what it hands in itself"
    return None


def _foreign(filename, solution):
    """'the library (PATH)' or 'a bundled solution (PATH)' when filename is one's, else None."""
    if filename is None:
        return None
    path = pathlib.Path(filename).resolve()
    if path.is_relative_to(PACKAGE):
        return f"the library ({path})"
    if not solution and path.is_relative_to(SOLUTIONS):
        return f"a bundled solution ({shown(path)})"
    return None


def _foreign_calls(function, solution):
    """The first Function class of the library's, function of the library's of function's own name (the answer
    itself: `interpret.induction_score` in induction_score), or anything of the solutions', that function's code
    names (also through a module: `attention.ReferenceScaledDotProductAttention`), or None."""
    codes, names = [function.__code__], set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    for name in sorted(names):
        value = function.__globals__.get(name)
        with warnings.catch_warnings():         # NumPy warns of np.object, np.str...: the grader's look, not yours
            warnings.simplefilter("ignore")
            attributes = [getattr(value, n, None) for n in sorted(names)] if inspect.ismodule(value) else []
        for thing in [value] + attributes:
            origin = _foreign(_file_of(thing), solution)
            library_function = isinstance(thing, type) and issubclass(thing, ta.Function) and thing is not ta.Function
            answer = inspect.isfunction(thing) and thing.__name__ == function.__name__
            if origin and (library_function or answer or origin.startswith("a bundled solution")):
                return f"{getattr(thing, '__qualname__', thing.__name__)} of {origin}"
    return None


def _file_of(thing):
    """The file a class, function or module comes from; None for anything else."""
    if not (inspect.isclass(thing) or inspect.ismodule(thing) or inspect.isfunction(thing)):
        return None
    try:
        return inspect.getfile(thing)
    except TypeError:                                   # built in
        return None


def todos_left(path):
    return path.read_text(encoding="utf-8").count(TODO)


def learners_or_bundled(name, attribute, fallback, exercises=EXERCISES, given=()):
    """What a lesson runs on for exercise name: attribute of the learner's exercises/NAME.py once no TODO is left in
    it, else of the bundled solution, else fallback (a student copy has no solutions/). given: the methods the
    exercise hands over (its registry entry's). Returns it and a line that says which it is and why."""
    mine, bundled = exercises / f"{name}.py", exercises / "solutions" / f"{name}.py"
    left = todos_left(mine) if mine.exists() else None
    if left == 0:
        try:
            yours = getattr(load(mine), attribute)
            why = borrowed(attribute, yours, given)
            if not why:
                return yours, f"yours, {shown(mine)} (python -m lessons check {name} grades it)"
        except Exception as error:
            why = f"{shown(mine)} did not load: {type(error).__name__}: {error}"
    else:
        why = f"{shown(mine)} " + ("is missing" if left is None else f"has {left} TODO{'s' * (left != 1)} left")
    if bundled.exists():
        return getattr(load(bundled), attribute), f"the bundled solution, {shown(bundled)} ({why})"
    return fallback, f"the library's {fallback.__name__} ({why}, and this copy has no solutions/)"


def shown(path):
    """path from the repository root when it is inside it (shorter to read), else as it is."""
    try:
        return str(path.resolve().relative_to(LESSONS.parent))
    except ValueError:
        return str(path)
