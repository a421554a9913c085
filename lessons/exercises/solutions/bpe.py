"""Solution · byte-level BPE: the merge step and encoding by merge rank (lesson 21)."""
import numpy as np

from lessons.exercises.given import split_special
from tinyattn.preprocessing.bpe import pre_tokenize, to_byte_chars


def merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(pair[0] + pair[1])
            i += 2                                          # both halves used: an occurrence never overlaps the last
        else:
            out.append(symbols[i])
            i += 1
    return out


def encode_piece(symbols, ranks):
    while True:
        known = [pair for pair in zip(symbols, symbols[1:]) if pair in ranks]
        if not known:
            return symbols
        symbols = merge(symbols, min(known, key=ranks.get))


def encode(text, vocab, ranks, special_tokens):
    """Given: text -> its ids. Special tokens are cut out first and looked up whole; every other stretch goes piece
    by piece through encode_piece."""
    ids = []
    for stretch, is_special in split_special(text, special_tokens):
        if is_special:
            ids.append(vocab[stretch])
            continue
        for piece in pre_tokenize(stretch):
            ids.extend(vocab[token] for token in encode_piece(list(to_byte_chars(piece)), ranks))
    return np.array(ids, dtype=np.int64)


def encode_batch(texts, vocab, merges, special_tokens):
    """Given: each text's ids, as the checker asks for them (merges: the (left, right) pairs, earliest first)."""
    ranks = {tuple(pair): rank for rank, pair in enumerate(merges)}
    return [encode(text, vocab, ranks, special_tokens) for text in texts]
