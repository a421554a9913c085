"""Looking inside a model, from the outside: record every module's output and every attention's weights in a
forward (recording.py), ablate or patch chosen heads (interventions.py). Built on the modules' forward hooks; the
engine knows nothing of it."""
from .interventions import ablate_heads, patch_heads
from .recording import Recording, record

__all__ = ["Recording", "ablate_heads", "patch_heads", "record"]
