"""Byte-level BPE (lesson 21): the learner's merge and encode_piece against the library's ByteLevelBPE on the probe
strings, and merge's edge cases."""
import functools

import numpy as np

from lessons.checking.checks import exercise
from lessons.checking.steps import Mismatch, step
from tinyattn.preprocessing.bpe import train as train_bpe
from tinyattn.preprocessing.probe_strings import probe_strings


SPECIAL = ("<|endoftext|>",)


@functools.lru_cache(maxsize=None)
def _bpe_reference():
    """The library's byte-level BPE with 500 merges learned on 1,000 probe strings of another seed (every category
    gets merges of its own), and the 1,000 probe strings (category, text) it is checked on."""
    training = [text for _, text in probe_strings(1000, seed=1, special_tokens=SPECIAL)]
    return train_bpe(training, 256 + len(SPECIAL) + 500, special_tokens=SPECIAL), probe_strings(1000, seed=0,
                                                                                                 special_tokens=SPECIAL)


def _ids(returned, count):
    """The learner's encode_batch's answer as lists of ints, or a Mismatch saying what it is instead."""
    if not isinstance(returned, list) or len(returned) != count:
        raise Mismatch(f"encode_batch returned {type(returned).__name__} {str(returned)[:60]}; it must be a list of "
                       f"{count} arrays of ids, one per text")
    bad = next((i for i, ids in enumerate(returned) if not (isinstance(ids, np.ndarray) and ids.ndim == 1 and
                                                            ids.dtype.kind in "iu")), None)
    if bad is not None:
        raise Mismatch(f"encode_batch's entry {bad} is {str(returned[bad])[:60]}, not a 1-D array of integer ids")
    return [ids.tolist() for ids in returned]


def _shown_ids(ids, tokenizer, start, most=24):
    """ids from position start, with their tokens, at most `most` of them."""
    tail = ids[start:start + most]
    tokens = [tokenizer.id_to_token(i) or "?" for i in tail]
    more = f" ... ({len(ids) - start - most} more)" if len(ids) > start + most else ""
    return f"{len(ids)} ids; from position {start} on: {tail}{more} = tokens {tokens}"


@exercise("21", "byte-level BPE: the merge step and encoding by merge rank",
          twins=["tinyattn.preprocessing.bpe:ByteLevelBPE", "tinyattn.preprocessing.bpe:train"])
def bpe(learner):
    tokenizer, strings = _bpe_reference()
    encode = lambda texts: _ids(learner.encode_batch(texts, tokenizer.vocab, tokenizer.merges, list(SPECIAL)),
                                len(texts))
    with step("your merge and encode_piece run: the given encode_batch gives ids for 'hello world'"):
        encode(["hello world"])
    with step(f"ids equal the library's ByteLevelBPE's ({len(tokenizer.merges)} merges) on the {len(strings):,} "
              "probe strings of tinyattn.preprocessing.probe_strings"):
        yours, theirs = encode([text for _, text in strings]), [tokenizer.encode(text).ids for _, text in strings]
        differ = [i for i, (a, b) in enumerate(zip(yours, theirs)) if a != b]
        if differ:
            i = differ[0]
            start = next((j for j, (a, b) in enumerate(zip(yours[i], theirs[i])) if a != b),
                         min(len(yours[i]), len(theirs[i])))
            category, text = strings[i]
            raise Mismatch(f"ids differ from the library's on {len(differ)} of {len(strings):,} strings; the first is "
                           f"string {i} ({category}): {text[:80]!r}{'...' if len(text) > 80 else ''}\n"
                           f"  yours: {_shown_ids(yours[i], tokenizer, start)}\n"
                           f"  the library's: {_shown_ids(theirs[i], tokenizer, start)}")
    cases = {"'a a a' with ('a', 'a'): occurrences never overlap": (["a", "a", "a"], ("a", "a"), ["aa", "a"]),
             "'a b a b' with ('a', 'b'): every occurrence": (["a", "b", "a", "b"], ("a", "b"), ["ab", "ab"]),
             "the pair at the start and at the end": (["Ġ", "t", "x", "Ġ", "t"], ("Ġ", "t"), ["Ġt", "x", "Ġt"]),
             "no occurrence (the pair the other way round)": (["b", "a"], ("a", "b"), ["b", "a"]),
             "one symbol": (["a"], ("a", "a"), ["a"]),
             "no symbols": ([], ("a", "b"), [])}
    with step("merge(symbols, pair) on its edge cases", cases) as each:
        for case, (symbols, pair, expected) in cases.items():
            with each.case(case):
                mine = learner.merge(symbols, pair)
                if mine != expected:
                    raise Mismatch(f"merge({symbols}, {pair}) returned {mine}; it must be {expected}")
