"""tinyattn.data, the old name (until 2026-11-29) of two packages that now say what they hold: tinyattn.datasets
(the datasets) and tinyattn.preprocessing (tokenizer, BPE, image processor, probe strings); beside PyTorch's
tinyattn.utils.data, a different thing, the old name misled. Every old import still works and gives the same
objects: `from tinyattn.data import CharCorpus, Tokenizer`, `from tinyattn.data.bpe import train`."""
import sys

from ..datasets import *                                                  # noqa: F401,F403 (the old names)
from ..datasets import dates, digits, numbers, repeats, sequences, text, vocab
from ..preprocessing import *                                             # noqa: F401,F403
from ..preprocessing import bpe, image_processor, probe_strings, tokenizer

# The old submodules (tinyattn.data.bpe and the rest) are the new modules themselves: patching one patches the other.
for _module in (dates, digits, numbers, repeats, sequences, text, vocab, bpe, image_processor, probe_strings,
                tokenizer):
    sys.modules[f"{__name__}.{_module.__name__.rpartition('.')[2]}"] = _module
del _module
