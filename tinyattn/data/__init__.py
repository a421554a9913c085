"""tinyattn.data, the old name (until 2026-11-29) of two packages that now say what they hold: tinyattn.datasets
(the datasets) and tinyattn.preprocessing (tokenizer, BPE, image processor, probe strings); beside PyTorch's
tinyattn.utils.data, a different thing, the old name misled. Every old import still works and gives the same
objects: `from tinyattn.data import CharCorpus, Tokenizer`, `from tinyattn.data.bpe import train`."""
import importlib
import sys

from .. import datasets, preprocessing
from ..datasets import *                                                  # noqa: F401,F403 (the old names)
from ..preprocessing import *                                             # noqa: F401,F403

__all__ = datasets.__all__ + preprocessing.__all__

# The old submodules (tinyattn.data.bpe and the rest) are the new modules themselves: patching one patches the other.
for _name, _package in {**dict.fromkeys(("dates", "digits", "numbers", "repeats", "sequences", "text", "vocab"),
                                        "datasets"),
                        **dict.fromkeys(("bpe", "image_processor", "probe_strings", "tokenizer"),
                                        "preprocessing")}.items():
    globals()[_name] = sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"tinyattn.{_package}.{_name}")
