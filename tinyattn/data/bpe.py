"""Byte-level BPE, GPT-2's tokenizer, built from scratch: the byte-to-character table, GPT-2's pre-tokenisation
pattern, merges trained on a corpus, encoding by merge rank, decoding, special tokens. `ByteLevelBPE.from_file`
reads the tokenizer.json of a byte-level BPE (GPT-2's, or one written by the `tokenizers` package) and gives the same
ids as `tokenizers` does; `train` learns the same merges as `tokenizers`' BpeTrainer, ties included.

Its method names follow `tokenizers.Tokenizer` (encode(text).ids, decode(ids, skip_special_tokens), decode_batch,
get_vocab_size, token_to_id, id_to_token), so `data.Tokenizer` wraps either. The pattern needs the `regex` package
(`\\p{L}` is any letter of any script, which Python's `re` cannot say): the lessons and hub extras install it.
"""
import functools
import heapq
import json
import re
from collections import Counter, defaultdict

# GPT-2's pre-tokenisation (Radford et al. 2019, openai/gpt-2 encoder.py): English contractions, then runs of
# letters, of digits, of other symbols, each with at most one space in front; whitespace runs give their last space
# to the word after them (\s+(?!\S)), so " world" keeps its space and "a   b" splits as "a", "  ", " b".
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    """GPT-2's table from each of the 256 bytes to a printable character: the printable Latin-1 bytes stand for
    themselves, the others (controls, space, 0x7F-0xA0, 0xAD) take the characters from U+0100 on, in byte order.
    A token is then a string of visible characters: a space is 'Ġ' (U+0120), a newline 'Ċ' (U+010A)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


CACHE_SIZE = 100_000             # pieces whose tokens an encoder remembers (text repeats its pieces endlessly)
BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


@functools.lru_cache(maxsize=None)
def _compiled(pattern):
    try:
        import regex
    except ImportError:
        raise ImportError("byte-level BPE splits text with GPT-2's pattern, which needs the regex package "
                          "(\\p{L}: a letter of any script): pip install regex, or pip install -e \".[hub]\"") from None
    return regex.compile(pattern)


def pre_tokenize(text, add_prefix_space=False):
    """text -> the pieces GPT-2's pattern splits it into (BPE never merges across two of them)."""
    if add_prefix_space and not text.startswith(" "):
        text = " " + text
    return _compiled(PATTERN).findall(text)


def to_byte_chars(piece):
    """A piece of text -> its UTF-8 bytes, each written as its character of the table ('é' -> 'Ã©')."""
    return "".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8"))


class Encoding:
    """What encode returns, as `tokenizers`' Encoding: the ids and the token strings."""

    def __init__(self, ids, tokens):
        self.ids, self.tokens = ids, tokens

    def __repr__(self):
        return f"Encoding(ids={self.ids}, tokens={self.tokens})"


class ByteLevelBPE:
    """A byte-level BPE: vocab maps each token (a string of table characters) to its id; merges is the ordered list
    of pairs (left, right), earliest first; special_tokens maps each special token's text to its id (it is cut out
    of the text before anything else, never split, and skipped by decode unless asked). Other added tokens, which
    are cut out the same way but decoded always, go in added_tokens."""

    def __init__(self, vocab, merges, special_tokens=None, added_tokens=None, add_prefix_space=False,
                 ignore_merges=False):
        self.vocab = dict(vocab)
        self.merges = [tuple(pair) for pair in merges]
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}   # a repeated pair keeps its last rank
        for left, right in self.merges:
            missing = [t for t in (left, right, left + right) if t not in self.vocab]
            if missing:
                raise ValueError(f"merge ({left!r}, {right!r}): {missing[0]!r} is not in the vocabulary")
        self.special_tokens = dict(special_tokens or {})
        self.added = {**dict(added_tokens or {}), **self.special_tokens}
        self.add_prefix_space, self.ignore_merges = add_prefix_space, ignore_merges
        self.id_to_text = {i: t for t, i in self.vocab.items()}
        self.id_to_text.update({i: t for t, i in self.added.items()})
        self.special_ids = set(self.special_tokens.values())
        # the longest added token first: where two start at the same place, the longer one is cut out
        by_length = sorted(self.added, key=len, reverse=True)
        self.added_pattern = "|".join(re.escape(t) for t in by_length) if by_length else None
        self.cache = {}
        _compiled(PATTERN)                # without the regex package, fail here, naming it, rather than at encode

    # --- reading a tokenizer.json ---------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path):
        """The byte-level BPE of a tokenizer.json (GPT-2's, or one `tokenizers` wrote). Settings this encoder does
        not implement are refused, naming the key, rather than encoded differently."""
        try:
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read {path} as JSON: {error}") from None
        if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
            raise ValueError(f"{path} is not a tokenizer.json: it has no 'model' object")
        model = spec["model"]
        _require(path, "model.type", model.get("type", "BPE"), ("BPE",))
        for key, allowed in (("dropout", (None, 0, 0.0)), ("continuing_subword_prefix", (None, "")),
                             ("end_of_word_suffix", (None, "")), ("byte_fallback", (None, False))):
            _require(path, f"model.{key}", model.get(key), allowed)
        _require(path, "normalizer", spec.get("normalizer"), (None,))
        pre = _section(path, spec, "pre_tokenizer")
        _require(path, "pre_tokenizer.type", pre.get("type"), ("ByteLevel",))
        _require(path, "pre_tokenizer.use_regex", pre.get("use_regex", True), (True,))
        _require(path, "post_processor.type", _section(path, spec, "post_processor").get("type", "ByteLevel"),
                 ("ByteLevel",))
        _require(path, "decoder.type", _section(path, spec, "decoder").get("type"), ("ByteLevel",))
        vocab, merges = model.get("vocab"), model.get("merges")
        if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
            raise ValueError(f"{path}: model.vocab must be an object of token -> integer id")
        if not isinstance(merges, list):
            raise ValueError(f"{path}: model.merges must be a list")
        special, added = {}, {}
        for token in spec.get("added_tokens") or []:
            if not isinstance(token, dict) or not isinstance(token.get("content"), str) or \
                    not isinstance(token.get("id"), int):
                raise ValueError(f"{path}: added token {token!r} needs a string 'content' and an integer 'id'")
            for key in ("single_word", "lstrip", "rstrip"):
                if token.get(key):
                    raise ValueError(f"{path}: added token {token['content']!r} sets {key}, which the python "
                                     "backend does not implement; use backend='tokenizers'")
            (special if token.get("special") else added)[token["content"]] = token["id"]
        pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]     # "a b" (GPT-2's file) or ["a", "b"]
        for merge, pair in zip(merges, pairs):
            if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(t, str) for t in pair):
                raise ValueError(f"{path}: merge {merge!r} is not a pair of tokens")
        try:
            return cls(vocab, pairs, special, added, add_prefix_space=bool(pre.get("add_prefix_space")),
                       ignore_merges=bool(model.get("ignore_merges")))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    # --- text -> ids ----------------------------------------------------------------------------------------
    def encode(self, text):
        """text -> Encoding(ids, tokens): added tokens cut out first, each stretch between them split by the
        pattern, each piece's bytes merged by rank."""
        ids, tokens = [], []
        for stretch, is_added in self._split_added(text):
            if is_added:
                ids.append(self.added[stretch])
                tokens.append(stretch)
                continue
            for piece in pre_tokenize(stretch, self.add_prefix_space):
                merged = self.bpe(to_byte_chars(piece))
                ids.extend(self.vocab[token] for token in merged)
                tokens.extend(merged)
        return Encoding(ids, tokens)

    def encode_batch(self, texts):
        return [self.encode(text) for text in texts]

    def bpe(self, word):
        """One piece, as table characters -> its tokens. Merge the adjacent pair of lowest rank (the earliest
        learned), the leftmost where it occurs twice, until no adjacent pair is a merge.

        Lesson 21 finds that pair by looking at every pair again after each merge, which takes time growing as the
        square of the piece's length (a run of 100,000 spaces or digits is one piece). Here a heap holds (rank,
        position) of the pairs, and the tokens a linked list, so a merge costs a logarithm: the order is the same."""
        if word in self.cache:
            return self.cache[word]
        if self.ignore_merges and word in self.vocab:    # Llama 3's files: a piece in the vocabulary stays whole
            return [word]
        missing = [c for c in word if c not in self.vocab]
        if missing:
            raise ValueError(f"byte {CHAR_TO_BYTE[missing[0]]:#04x} ({missing[0]!r}) is not in the vocabulary: this "
                             "file's BPE was trained without the full byte alphabet")
        parts, n = list(word), len(word)                  # parts[j] is None once merged into its left neighbour
        after, before = list(range(1, n + 1)), list(range(-1, n - 1))
        queue = [(self.ranks[pair], i) for i, pair in enumerate(zip(word, word[1:])) if pair in self.ranks]
        heapq.heapify(queue)
        while queue:
            rank, i = heapq.heappop(queue)
            j = after[i]
            if parts[i] is None or j == n or self.ranks.get((parts[i], parts[j])) != rank:
                continue                                   # that pair is gone: one side was merged since
            parts[i], parts[j] = parts[i] + parts[j], None
            after[i] = after[j]
            if after[i] < n:
                before[after[i]] = i
            for left in (before[i], i):                    # the two pairs the new token is part of
                if left >= 0 and after[left] < n and (parts[left], parts[after[left]]) in self.ranks:
                    heapq.heappush(queue, (self.ranks[parts[left], parts[after[left]]], left))
        parts = [part for part in parts if part is not None]
        if len(self.cache) < CACHE_SIZE:
            self.cache[word] = parts
        return parts

    def _split_added(self, text):
        """(stretch, is_added) for the stretches of text between added tokens, and the tokens themselves."""
        if self.added_pattern is None:
            return [(text, False)] if text else []
        out, start = [], 0
        for match in _compiled(self.added_pattern).finditer(text):
            if match.start() > start:
                out.append((text[start:match.start()], False))
            out.append((match.group(), True))
            start = match.end()
        if start < len(text):
            out.append((text[start:], False))
        return out

    # --- ids -> text ----------------------------------------------------------------------------------------
    def decode(self, ids, skip_special_tokens=True):
        """ids -> text: each token's characters back to their bytes (a token with a character outside the table,
        such as a special token with a space, stands for its own UTF-8), the bytes read as UTF-8; bytes that are no
        UTF-8 (a piece of a character cut off) become U+FFFD, as in `tokenizers`."""
        data = bytearray()
        for i in ids:
            if i not in self.id_to_text:
                raise ValueError(f"token id {i} is not in the vocabulary (ids run 0..{max(self.id_to_text)})")
            if skip_special_tokens and i in self.special_ids:
                continue
            token = self.id_to_text[i]
            if all(c in CHAR_TO_BYTE for c in token):
                data.extend(CHAR_TO_BYTE[c] for c in token)
            else:
                data.extend(token.encode("utf-8"))
        return data.decode("utf-8", errors="replace")

    def decode_batch(self, sequences, skip_special_tokens=True):
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    # --- the vocabulary -------------------------------------------------------------------------------------
    def get_vocab(self, with_added_tokens=True):
        return {**self.vocab, **self.added} if with_added_tokens else dict(self.vocab)

    def get_vocab_size(self, with_added_tokens=True):
        return len(self.get_vocab(with_added_tokens))

    def token_to_id(self, token):
        return self.added.get(token, self.vocab.get(token))

    def id_to_token(self, i):
        return self.id_to_text.get(i)


def _section(path, spec, key):
    """spec[key], an object, or {} where the file has null or nothing."""
    value = spec.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {key} must be an object or null, not {value!r}")
    return value


def _require(path, key, value, allowed):
    if value not in allowed:
        raise ValueError(f"{path}: {key} is {value!r}; the python backend reads byte-level BPE files with "
                         f"{key} {' or '.join(repr(a) for a in allowed)} only (backend='tokenizers' reads others)")


# --- training ---------------------------------------------------------------------------------------------------
def train(texts, vocab_size, special_tokens=(), min_frequency=0, add_prefix_space=False):
    """Learn a byte-level BPE from texts (an iterable of strings), as `tokenizers`' BpeTrainer does with the
    ByteLevel pre-tokenizer and its 256-character alphabet: the same vocabulary and the same merges in the same
    order. The vocabulary: the special tokens (ids 0, 1, ...), the 256 byte characters in code-point order, then
    one token per merge, until vocab_size tokens or no pair occurs min_frequency times.

    Each step merges the pair of adjacent tokens that occurs most often, counted over every occurrence in every
    piece (overlaps too: 'aaa' holds ('a', 'a') twice) times the piece's count, into a new token everywhere, left
    to right. A tie goes to the pair whose ids are smallest, first the left id, then the right one.

    Lesson 21 recounts every pair after every merge. Here, as in `tokenizers`, a merge changes only the counts of
    the pairs around each place it merges, and a heap holds (count, pair, the pieces where the pair was made); an
    entry whose count has gone down since it was pushed goes back with the current count when it comes up. The
    merges are the same: a pair is made only when one of its two tokens is, and each token is made by one merge
    (where a token's text is whole in a piece, nothing merged across its ends, so that text was merged the same way
    in every piece), so each pair has one entry, listing every piece that holds it.
    """
    words = Counter()
    for text in texts:
        words.update(to_byte_chars(piece) for piece in pre_tokenize(text, add_prefix_space))
    names, ids = [], {}
    for token in [*special_tokens, *sorted(BYTE_TO_CHAR.values())]:
        if token not in ids:
            ids[token] = len(names)
            names.append(token)
    pieces = [[ids[c] for c in word] for word in words]
    counts = list(words.values())
    pair_counts, where = Counter(), defaultdict(set)
    for i, piece in enumerate(pieces):
        for pair in zip(piece, piece[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    queue = []                         # entries (-count, pair, pieces): the most frequent, then the smallest pair

    def push(found):
        for pair, positions in found.items():
            if pair_counts[pair] > 0:
                heapq.heappush(queue, (-pair_counts[pair], pair, positions))
    push(where)
    merges = []
    while len(names) < vocab_size and queue:
        minus_count, pair, positions = heapq.heappop(queue)
        if -minus_count != pair_counts[pair]:
            heapq.heappush(queue, (-pair_counts[pair], pair, positions))
            continue
        if -minus_count < max(1, min_frequency):
            break
        token = names[pair[0]] + names[pair[1]]
        if token not in ids:
            ids[token] = len(names)
            names.append(token)
        merges.append(pair)
        created = defaultdict(set)
        for i in positions:
            for changed, change in _merge_in_place(pieces[i], pair, ids[token]):
                pair_counts[changed] += change * counts[i]
                if change > 0:
                    created[changed].add(i)
        push(created)
    special = {t: ids[t] for t in special_tokens}
    return ByteLevelBPE(ids, [(names[a], names[b]) for a, b in merges], special, add_prefix_space=add_prefix_space)


def _merge_in_place(piece, pair, new):
    """Replace each occurrence of pair in piece (a list of ids), left to right, by new; returns the changes of the
    neighbouring pairs' counts, (pair, -1 or +1), as the merge goes."""
    changes, i = [], 0
    while i < len(piece) - 1:
        if (piece[i], piece[i + 1]) == pair:
            if i > 0:
                changes += [((piece[i - 1], pair[0]), -1), ((piece[i - 1], new), 1)]
            piece[i:i + 2] = [new]
            if i < len(piece) - 1:
                changes += [((pair[1], piece[i + 1]), -1), ((new, piece[i + 1]), 1)]
        i += 1
    return changes
