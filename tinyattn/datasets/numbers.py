"""English number words -> digits: "three thousand forty two" -> "3042". A small translation task with a known
answer: the decoder must write zeros for the places no word mentions."""
import numpy

from .vocab import Vocab, pad_batch

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n):
    """0 <= n < 1,000,000 in English words, without "and": 3042 -> ['three', 'thousand', 'forty', 'two']."""
    if n < 20:
        return [ONES[n]]
    if n < 100:
        return [TENS[n // 10]] + ([ONES[n % 10]] if n % 10 else [])
    if n < 1000:
        return [ONES[n // 100], "hundred"] + (number_words(n % 100) if n % 100 else [])
    return number_words(n // 1000) + ["thousand"] + (number_words(n % 1000) if n % 1000 else [])


class NumberWords:
    """Random numbers below `limit` as (word ids, digit ids), split 80/10/10 with a fixed seed; no number appears in
    two splits."""

    def __init__(self, n=20000, limit=1_000_000, seed=0):
        rng = numpy.random.default_rng(seed)
        numbers = rng.choice(limit, size=n, replace=False)
        self.words = [number_words(int(x)) for x in numbers]
        self.digits = [str(int(x)) for x in numbers]
        self.src_vocab = Vocab(ONES + TENS[2:] + ["hundred", "thousand"])
        self.tgt_vocab = Vocab("0123456789")
        self.src = pad_batch([self.src_vocab.encode(w) for w in self.words])
        self.tgt = pad_batch([self.tgt_vocab.encode(d, bos=True, eos=True) for d in self.digits])
        cut1, cut2 = int(0.8 * n), int(0.9 * n)
        self.split = {"train": numpy.arange(cut1), "val": numpy.arange(cut1, cut2), "test": numpy.arange(cut2, n)}
