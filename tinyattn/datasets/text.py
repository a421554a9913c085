"""A character corpus read from text that ships with Python itself: the standard library's own source files."""
import math
import os
import sysconfig

import numpy

from .vocab import Vocab

DEFAULT_MODULES = ["textwrap.py", "string.py", "argparse.py", "dataclasses.py", "functools.py", "heapq.py",
                   "bisect.py", "fractions.py", "statistics.py", "shlex.py", "difflib.py", "calendar.py",
                   "pprint.py", "contextlib.py", "copy.py", "random.py"]


class CharCorpus:
    """The concatenated source of a fixed list of standard-library modules, as character ids.

    Characters outside printable ASCII become '?'. Split 90/10 into train and validation by position.
    """

    def __init__(self, modules=DEFAULT_MODULES, max_chars=None):
        folder = sysconfig.get_paths()["stdlib"]
        texts = []
        for name in modules:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                texts.append(f.read())
        text = "\n".join(texts)
        text = "".join(c if (32 <= ord(c) < 127 or c == "\n") else "?" for c in text)
        self.text = text[:max_chars] if max_chars else text
        self.vocab = Vocab(self.text)
        ids = numpy.array(self.vocab.encode(self.text), dtype=numpy.int64)
        cut = int(0.9 * len(ids))
        self.train, self.val = ids[:cut], ids[cut:]

    def batch(self, split, batch_size, block_size, rng):
        """Random windows: inputs (B, T) and the next characters (B, T). Every start 0..len - T - 1 can be drawn, the
        last window (whose targets end on the split's last character) included, as nanoGPT's
        torch.randint(len(data) - block_size, (batch_size,))."""
        ids = self.train if split == "train" else self.val
        starts = rng.integers(0, len(ids) - block_size, size=batch_size)
        x = numpy.stack([ids[s:s + block_size] for s in starts])
        y = numpy.stack([ids[s + 1:s + block_size + 1] for s in starts])
        return x, y


def bigram_bits_per_char(train, val, vocab_size, smoothing=1.0):
    """Bits per character on val of a count-based bigram model fitted on train (add-`smoothing` counts)."""
    counts = numpy.full((vocab_size, vocab_size), smoothing)
    numpy.add.at(counts, (train[:-1], train[1:]), 1)
    probs = counts / counts.sum(axis=1, keepdims=True)
    return float(-numpy.log(probs[val[:-1], val[1:]]).mean() / math.log(2))
