"""The exercises' registry: every check in lessons/checking/checks/, found by listing the folder, under its
exercise's name, in the order of the lessons (each exercise with its lesson, its title, the methods it hands over
and the library's versions of its answer: checks.Exercise)."""
import importlib
import pathlib

from lessons.checking import checks


def _listed():
    """name -> Exercise for every checks/NAME.py, by lesson and place within it."""
    found = []
    for path in sorted(pathlib.Path(checks.__file__).parent.glob("*.py")):
        if path.stem == "__init__":
            continue
        check = getattr(importlib.import_module(f"{checks.__name__}.{path.stem}"), path.stem, None)
        if not hasattr(check, "exercise"):
            raise ImportError(f"{path} has no check function {path.stem}(learner) marked with @exercise(...)")
        found.append(check.exercise)
    return {item.name: item for item in sorted(found, key=lambda item: (item.lesson, item.place))}


registered = _listed()
