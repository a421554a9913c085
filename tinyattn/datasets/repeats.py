"""Random token sequences with one stretch repeated, the data on which induction heads form (Olsson et al. 2022)."""
import numpy

FILLER, FIRST, SECOND = 0, 1, 2          # the values of `part`


def repeated_tokens(batch, length, vocab_size, min_span, max_span, rng, distinct=False):
    """`batch` sequences of `length` tokens drawn uniformly from range(vocab_size), in each of which a stretch of a
    random span (min_span..max_span tokens) at a random place is copied a random period later (period >= span, so
    the copies do not overlap). The distance between the copies varies from sequence to sequence, so a model can
    predict the second copy only by looking up what followed the current token earlier, not by attending a fixed
    number of positions back. The second copy's first token is unpredictable (nothing says where it starts); the
    ones after it are. distinct=True draws each sequence's tokens without replacement (vocab_size >= length), so
    that no token occurs twice but in the copy, as with a vocabulary far larger than the sequence (the papers'
    setting): the token after an earlier occurrence is then never ambiguous.

    Returns tokens (batch, length) int64 and part (batch, length) int8: FIRST on the first copy, SECOND on the
    second, FILLER elsewhere."""
    if not 1 <= min_span <= max_span or 2 * max_span > length:
        raise ValueError(f"need 1 <= min_span <= max_span and two copies of max_span within length; got "
                         f"min_span={min_span}, max_span={max_span}, length={length}")
    if vocab_size < (length if distinct else 2):
        raise ValueError(f"vocab_size must be at least {'length' if distinct else 2}, got {vocab_size}")
    if distinct:
        tokens = numpy.argsort(rng.random((batch, vocab_size)), axis=1)[:, :length]
    else:
        tokens = rng.integers(0, vocab_size, size=(batch, length))
    part = numpy.full((batch, length), FILLER, dtype=numpy.int8)
    spans = rng.integers(min_span, max_span + 1, size=batch)
    for row, span in zip(range(batch), spans):
        period = rng.integers(span, length - span + 1)            # second copy starts `period` after the first
        start = rng.integers(0, length - span - period + 1)
        tokens[row, start + period:start + period + span] = tokens[row, start:start + span]
        part[row, start:start + span] = FIRST
        part[row, start + period:start + period + span] = SECOND
    return tokens, part
