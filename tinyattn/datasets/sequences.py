"""Synthetic sequence tasks: copy, reverse, sort, over random digit strings of variable length."""
import numpy

from .vocab import Vocab, pad_batch


class SequenceTask:
    """N random sequences of symbols with lengths in [min_len, max_len], and their copy, reversal or sort.

    src (N, max_len) and tgt (N, max_len + 2) = BOS + answer + EOS, right-padded. lengths (N,) for bucketing.
    """

    TASKS = {"copy": lambda s: s, "reverse": lambda s: s[::-1], "sort": sorted}

    def __init__(self, task, n, min_len, max_len, symbols=10, seed=0):
        if task not in self.TASKS:
            raise ValueError(f"task must be one of {sorted(self.TASKS)}, got {task!r}")
        rng = numpy.random.default_rng(seed)
        self.vocab = Vocab([chr(ord("a") + i) for i in range(symbols)])
        self.lengths = rng.integers(min_len, max_len + 1, size=n)
        words = [[chr(ord("a") + int(c)) for c in rng.integers(0, symbols, size=length)] for length in self.lengths]
        self.src = pad_batch([self.vocab.encode(w) for w in words], length=max_len)
        self.tgt = pad_batch([self.vocab.encode(self.TASKS[task](w), bos=True, eos=True) for w in words],
                             length=max_len + 2)
