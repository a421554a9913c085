"""Looking inside a model, from the outside: record every module's output and every attention's weights in a
forward (recording.py). Built on the modules' forward hooks; the engine knows nothing of it."""
from .recording import Recording, record

__all__ = ["Recording", "record"]
