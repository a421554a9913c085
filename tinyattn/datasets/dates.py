"""Human-readable dates -> ISO 8601, generated with the standard library (the classic attention demo).

"Monday, April 3, 2017" -> "2017-04-03". Each example also records where the year, month and day sit in the source,
so a lesson can check that the model's attention lines each output character up with the words it comes from.
"""
import datetime

import numpy

from .vocab import Vocab, pad_batch

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# Each format is a list of (role, how to write it); roles year/month/day mark the spans the output copies from.
FORMATS = [
    [("day", "%d"), (None, " "), ("month", "%B"), (None, " "), ("year", "%Y")],
    [("month", "%B"), (None, " "), ("day", "%d"), (None, ", "), ("year", "%Y")],
    [("weekday", "%A"), (None, ", "), ("month", "%B"), (None, " "), ("day", "%d"), (None, ", "), ("year", "%Y")],
    [("weekday", "%A"), (None, " "), ("day", "ord"), (None, " of "), ("month", "%B"), (None, " "), ("year", "%Y")],
    [("day", "%d"), (None, " "), ("month", "%b"), (None, " "), ("year", "%Y")],
    [("month", "%b"), (None, " "), ("day", "%d"), (None, " "), ("year", "%Y")],
    [("weekday", "%a"), (None, " "), ("month", "%b"), (None, " "), ("day", "%d"), (None, " "), ("year", "%Y")],
    [("day", "%d"), (None, "."), ("month", "%m"), (None, "."), ("year", "%Y")],
    [("year", "%Y"), (None, "/"), ("month", "%m"), (None, "/"), ("day", "%d")],
    [("month", "%B"), (None, " "), ("day", "ord"), (None, " "), ("year", "%Y")],
]


def _write(date, how):
    if how == "ord":
        return _ordinal(date.day)
    if how == "%d":
        return str(date.day)
    return {"%B": MONTHS[date.month - 1], "%b": MONTHS[date.month - 1][:3], "%A": DAYS[date.weekday()],
            "%a": DAYS[date.weekday()][:3], "%m": f"{date.month:02d}", "%Y": f"{date.year:04d}"}[how]


def make_date(date, fmt, lowercase=False):
    """(source text, ISO target, spans {role: (start, end)}) for one date in one format."""
    text, spans = "", {}
    for role, how in fmt:
        piece = how if role is None else _write(date, how)
        if lowercase:
            piece = piece.lower()
        if role is not None:
            spans[role] = (len(text), len(text) + len(piece))
        text += piece
    return text, date.isoformat(), spans


class DateDataset:
    """Random dates from 1950 to 2049 in random formats, split 80/10/10 with a fixed seed.

    Arrays: src (N, S) and tgt (N, 12) = BOS + "YYYY-MM-DD" + EOS, right-padded with 0. spans[i] gives the source
    span of the year, month and day of example i.
    """

    def __init__(self, n=10000, seed=0):
        rng = numpy.random.default_rng(seed)
        start = datetime.date(1950, 1, 1).toordinal()
        days = rng.integers(0, datetime.date(2049, 12, 31).toordinal() - start + 1, size=n)
        formats = rng.integers(0, len(FORMATS), size=n)
        lowercase = rng.random(n) < 0.3
        rows = [make_date(datetime.date.fromordinal(int(start + d)), FORMATS[f], bool(low))
                for d, f, low in zip(days, formats, lowercase)]
        self.sources, self.targets, self.spans = zip(*rows)
        self.src_vocab = Vocab("".join(self.sources) + "".join(
            make_date(datetime.date(2000, m, 1), f, low)[0] for m in range(1, 13) for f in FORMATS
            for low in (False, True)))
        self.tgt_vocab = Vocab("0123456789-")
        self.src = pad_batch([self.src_vocab.encode(s) for s in self.sources])
        self.tgt = pad_batch([self.tgt_vocab.encode(t, bos=True, eos=True) for t in self.targets])
        cut1, cut2 = int(0.8 * n), int(0.9 * n)
        self.split = {"train": numpy.arange(cut1), "val": numpy.arange(cut1, cut2), "test": numpy.arange(cut2, n)}

    @staticmethod
    def target_role(position):
        """Which source span output character `position` of "YYYY-MM-DD" copies from (None for the dashes)."""
        return "year" if position < 4 else "month" if 5 <= position < 7 else "day" if position >= 8 else None
