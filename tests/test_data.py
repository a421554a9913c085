"""The datasets: deterministic, split without overlap, and their annotations true to the data."""
import numpy as np
import pytest

from tinyattn.datasets import (CharCorpus, DateDataset, DigitStrips, NumberWords, SequenceTask, Vocab,
                               bigram_bits_per_char, number_words, pad_batch, random_shifts, repeated_tokens)
from tinyattn.datasets.digits import WORDS
from tinyattn.datasets.repeats import FIRST, SECOND


def test_vocab_round_trip_and_padding():
    vocab = Vocab("abc")
    ids = vocab.encode("cab", bos=True, eos=True)
    assert ids[0] == vocab.bos_id and ids[-1] == vocab.eos_id and vocab.decode(ids) == "cab"
    assert vocab.decode(ids + [5, 6]) == "cab"                     # stops at EOS
    with pytest.raises(KeyError, match="z"):
        vocab.encode("zz")
    np.testing.assert_array_equal(pad_batch([[1, 2], [3]]), [[1, 2], [3, 0]])


def test_dates_spans_point_at_the_year_month_and_day():
    data = DateDataset(n=400, seed=3)
    months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    for source, target, spans in zip(data.sources, data.targets, data.spans):
        year, month, day = target.split("-")
        assert source[slice(*spans["year"])] == year
        piece = source[slice(*spans["month"])].lower()
        assert piece == month or piece[:3] == months[int(month) - 1]
        assert source[slice(*spans["day"])].rstrip("stndrh") == str(int(day))
    assert data.tgt_vocab.decode(data.tgt[0]) == data.targets[0]
    assert data.src_vocab.decode(data.src[0]) == data.sources[0]
    again = DateDataset(n=400, seed=3)
    assert again.sources == data.sources                           # fixed seed, same data
    assert [DateDataset.target_role(i) for i in range(10)] == ["year"] * 4 + [None, "month", "month", None,
                                                                             "day", "day"]


def test_number_words():
    assert number_words(0) == ["zero"]
    assert " ".join(number_words(3042)) == "three thousand forty two"
    assert " ".join(number_words(900_017)) == "nine hundred thousand seventeen"
    data = NumberWords(n=500)
    assert not set(data.digits[i] for i in data.split["train"]) & set(data.digits[i] for i in data.split["test"])
    assert data.src_vocab.decode(data.src[0], " ") == " ".join(data.words[0])


def test_sequence_tasks():
    task = SequenceTask("sort", n=50, min_len=2, max_len=7, seed=1)
    for src, tgt, length in zip(task.src, task.tgt, task.lengths):
        assert (src[length:] == 0).all() and (src[:length] > 2).all()
        np.testing.assert_array_equal(tgt[1:length + 1], np.sort(src[:length]))
        assert tgt[length + 1] == task.vocab.eos_id
    with pytest.raises(ValueError, match="task"):
        SequenceTask("shuffle", 5, 1, 2)


def test_corpus_and_bigram_baseline():
    corpus = CharCorpus(max_chars=20_000)
    assert len(corpus.train) + len(corpus.val) == 20_000
    x, y = corpus.batch("train", 3, 16, np.random.default_rng(0))
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    short = CharCorpus(max_chars=100)                             # val holds 10 characters: 10 - 4 windows of 4
    x, y = short.batch("val", 400, 4, np.random.default_rng(0))
    assert sorted({tuple(row) for row in x}) == sorted({tuple(short.val[s:s + 4]) for s in range(6)})
    assert (y[:, -1] == short.val[-1]).any()                      # the last window, ending on the last character
    bits = bigram_bits_per_char(corpus.train, corpus.val, len(corpus.vocab))
    assert 1.0 < bits < np.log2(len(corpus.vocab))                 # better than uniform, worse than perfect


def test_digit_strips_captions_match_their_digits():
    strips = DigitStrips(n=60, length=3)
    for caption, labels in zip(strips.captions, strips.labels):
        assert strips.vocab.decode(caption, " ") == " ".join(WORDS[d] for d in labels)
    assert strips.images.shape == (60, 1, 8, 24) and 0 <= strips.images.min() and strips.images.max() <= 1


def test_random_shifts_rolls_each_image_by_at_most_the_given_pixels():
    images = np.arange(3 * 1 * 6 * 6, dtype=np.float32).reshape(3, 1, 6, 6)
    shifted = random_shifts(images, np.random.default_rng(0), most=1)
    assert shifted.shape == images.shape
    for image, moved in zip(images, shifted):
        rolls = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                 if np.array_equal(np.roll(image, (dy, dx), axis=(1, 2)), moved)]
        assert len(rolls) == 1
    np.testing.assert_array_equal(random_shifts(images, np.random.default_rng(0), most=1), shifted)


def test_repeated_tokens_copy_one_stretch_at_varying_periods():
    tokens, part = repeated_tokens(400, 32, 16, 3, 10, np.random.default_rng(0))
    assert tokens.shape == part.shape == (400, 32) and tokens.min() >= 0 and tokens.max() < 16
    periods, spans = set(), set()
    for row, marks in zip(tokens, part):
        first, second = np.flatnonzero(marks == FIRST), np.flatnonzero(marks == SECOND)
        assert len(first) == len(second) and 3 <= len(first) <= 10
        assert (np.diff(first) == 1).all() and (np.diff(second) == 1).all() and first[-1] < second[0]
        np.testing.assert_array_equal(row[first], row[second])
        periods.add(second[0] - first[0])
        spans.add(len(first))
    assert len(periods) > 15 and spans == set(range(3, 11))        # no fixed offset, every span drawn
    again = repeated_tokens(400, 32, 16, 3, 10, np.random.default_rng(0))
    np.testing.assert_array_equal(again[0], tokens)
    with pytest.raises(ValueError, match="max_span=20"):
        repeated_tokens(1, 32, 16, 3, 20, np.random.default_rng(0))


def test_repeated_tokens_distinct_repeat_only_in_the_copy():
    tokens, part = repeated_tokens(200, 40, 48, 2, 12, np.random.default_rng(1), distinct=True)
    for row, marks in zip(tokens, part):
        assert len(set(row)) == len(row) - (marks == SECOND).sum()       # every repeat is a copied token
    with pytest.raises(ValueError, match="vocab_size must be at least length"):
        repeated_tokens(1, 40, 39, 2, 12, np.random.default_rng(0), distinct=True)
