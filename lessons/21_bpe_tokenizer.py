# %% [markdown]
# # 21 · Byte-pair encoding from scratch: GPT-2's tokenizer
#
# A language model reads ids, not text. Lesson 06 gave every character its own id: about a hundred of them, and a
# model that spends a step on every letter. GPT-2 (Radford et al. 2019) reads 50,257 *tokens*, pieces of text from
# a single byte to a whole word: ' the' is one token, ' attention' one, 'ü' two. The pieces come from byte-pair
# encoding (BPE), a compression scheme (Gage 1994) that Sennrich et al. (2016) turned into a vocabulary for
# translation: start from single symbols, and again and again join the pair of neighbours that occurs most often
# into one new symbol. GPT-2 runs it on bytes, so every text has an encoding and no token is ever "unknown".
#
# This lesson builds that tokenizer from nothing but the standard library and the `regex` package, in the order text
# flows through it: bytes and a printable character for each, the pattern that cuts text into pieces, learning the
# merges, encoding by merge rank, decoding, and special tokens. Then it measures what a vocabulary buys (bytes per
# token against vocabulary size) and what it does to numbers, code and languages other than English, and checks the
# result against Hugging Face's `tokenizers`, which every GPT-2 in the wild is read with: the same merges from the
# same text, and the same ids on 1,000 strings chosen to be hard. The library's own version of what is built here
# is `tinyattn.preprocessing.bpe`; `Tokenizer.from_pretrained(folder, backend="python")` reads a real model's
# tokenizer.json (or GPT-2's older vocab.json and merges.txt) with it.

# %%
import os
import sysconfig
import time
from collections import Counter

import numpy as np
import regex
import tokenizers
from tokenizers import decoders, pre_tokenizers, processors, trainers

from tinyattn import viz
from tinyattn.datasets.text import DEFAULT_MODULES
from tinyattn.lesson import from_pretrained, options, plot_path, progress, report
from tinyattn.preprocessing import Tokenizer, bpe
from tinyattn.preprocessing.probe_strings import CATEGORIES, probe_strings

args = options(__doc__, [("--weights", dict(default=None, help="also read GPT-2's own tokenizer: a hub name (gpt2, "
                                                                 "needs the hub extra) or a folder holding tokenizer.json"))])
if args.weights is not None:           # read first, so a missing file or network stops the run at once
    gpt2_tokenizer, = from_pretrained(args.weights, Tokenizer)
started = time.perf_counter()

# %% [markdown]
# ## The text: Python's own source, and one sentence in eleven languages
# The merges are learned from the source of standard-library modules (the corpus of lesson 06, here as it is, not
# cut to ASCII): code, and English in its comments and docstrings. Two modules are kept out, to measure on text the
# tokenizer has not seen. The sentence below, the same in eleven languages, was written for this lesson (it is
# under the repository's licence); it never enters training, which is the situation of every language a tokenizer's
# training text holds little of.

# %%
def read_module(name):
    with open(os.path.join(sysconfig.get_paths()["stdlib"], name), encoding="utf-8") as f:
        return f.read()


held_out_modules = DEFAULT_MODULES[-2:]
training_modules = DEFAULT_MODULES[:4] if args.quick else DEFAULT_MODULES[:-2]
training_texts = [read_module(name) for name in training_modules]
held_out = "\n".join(read_module(name) for name in held_out_modules)
print(f"training text: {len(training_modules)} modules, {sum(len(t) for t in training_texts):,} characters; "
      f"held out: {', '.join(held_out_modules)}, {len(held_out):,} characters")
SENTENCE = {
    "English": "The model reads the text as a sequence of tokens, and every token becomes a vector.",
    "German": "Das Modell liest den Text als eine Folge von Tokens, und jedes Token wird zu einem Vektor.",
    "French": "Le modèle lit le texte comme une suite de jetons, et chaque jeton devient un vecteur.",
    "Spanish": "El modelo lee el texto como una secuencia de tokens, y cada token se convierte en un vector.",
    "Russian": "Модель читает текст как последовательность токенов, и каждый токен становится вектором.",
    "Greek": "Το μοντέλο διαβάζει το κείμενο ως ακολουθία συμβόλων, και κάθε σύμβολο γίνεται διάνυσμα.",
    "Hindi": "मॉडल पाठ को टोकनों के क्रम के रूप में पढ़ता है, और हर टोकन एक सदिश बन जाता है।",
    "Arabic": "يقرأ النموذج النص كسلسلة من الرموز، ويصبح كل رمز متجهًا.",
    "Chinese": "模型把文本读作一串词元，每个词元都变成一个向量。",
    "Japanese": "モデルはテキストをトークンの列として読み、各トークンはベクトルになる。",
    "Korean": "모델은 텍스트를 토큰의 나열로 읽고, 각 토큰은 벡터가 된다.",
}
for language, text in SENTENCE.items():
    print(f"{language:9} {len(text):3} characters, {len(text.encode('utf-8')):3} bytes of UTF-8")

# %% [markdown]
# ## Bytes, and a visible character for each
# UTF-8 writes a character as 1 to 4 bytes: ASCII as one, 'é' as two, a Chinese character as three, most emoji as
# four, and an emoji with a skin tone or a joiner as several characters in a row. Starting from the 256 byte
# values makes every text encodable. But the merges and the vocabulary are stored as strings (in tokenizer.json),
# and a byte such as 0x20 (space) or 0x0A (newline) would make them unreadable or ambiguous. So GPT-2 gives each byte
# a visible character: a byte whose Latin-1 character is visible stands for itself ('a' for 0x61, 'é' for 0xE9), and
# the other 68 (controls, space, 0x7F-0xA0, the soft hyphen 0xAD) take the characters from U+0100 on, in byte order.
# A space becomes 'Ġ', a newline 'Ċ': the 'Ġ' all over GPT-2's vocabulary is a word's leading space.

# %%
visible = [b for b in range(256) if chr(b).isprintable() and not chr(b).isspace()]
table = {b: chr(b) for b in visible}
for b in range(256):
    if b not in table:
        table[b] = chr(256 + len(table) - len(visible))
assert table == bpe.bytes_to_unicode()
print(f"{len(visible)} bytes stand for themselves; space -> {table[0x20]!r}, newline -> {table[0x0A]!r}, "
      f"tab -> {table[0x09]!r}")
for text in ["é", "注", "👍🏽", "👩‍💻"]:
    data = text.encode("utf-8")
    print(f"{text!r}: {len(text)} character(s), bytes {data.hex(' ')}, written {''.join(table[b] for b in data)!r}")

# %% [markdown]
# ## Cutting text into pieces first
# BPE left alone would learn tokens like 'e t' or 'dog.' that straddle words and punctuation. GPT-2 first cuts the
# text with one regular expression and merges only inside a piece:
#
#     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
#
# English contractions; a run of letters of any script (`\p{L}`, which Python's `re` cannot say: hence the `regex`
# package), of digits (`\p{N}`), or of other symbols, each with at most one space in front; and whitespace, where
# `\s+(?!\S)` leaves the last space of a run to the word after it, so ' world' is the same piece wherever it stands.
# The contractions are English and ASCII only: "we’ll" with a typographer's apostrophe splits differently, and "'S"
# is no contraction at all.

# %%
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
assert PATTERN == bpe.PATTERN
pattern = regex.compile(PATTERN)
for text in ["Hello world, it's 2024!", "We’ll see WE'LL", "x  = 1\n    return x", "Größe 大小 3½"]:
    pieces = pattern.findall(text)
    assert "".join(pieces) == text and pieces == bpe.pre_tokenize(text)
    print(f"{text!r:28} -> {pieces}")

# %% [markdown]
# ## Learning the merges
# Count every piece of the training text once per occurrence, write each as its byte characters, and repeat: count
# every pair of neighbouring tokens over all pieces (each occurrence times its piece's count; in 'aaa' the pair
# ('a', 'a') stands twice), join the most frequent pair into a new token everywhere it occurs (left to right), and
# record the merge. The order of the merges is the tokenizer: encoding replays them.
#
# Ties are frequent (late in training, many pairs occur equally often), and who wins decides the vocabulary. Here,
# as in `tokenizers`, tokens carry ids (the special tokens first, then the 256 byte characters in code-point order,
# then each new token as it is made) and a tie goes to the pair with the smallest ids, the left one first.
#
# This version recounts everything after every merge: clear, and slow (each merge reads the whole text again). The
# library's `bpe.train` updates the counts by what each merge changes, and keeps the pairs in a priority queue, as
# `tokenizers` does; both must give the same merges.

# %%
SPECIAL = ["<|endoftext|>"]


def piece_counts(texts):
    counts = Counter()
    for text in texts:
        counts.update(pattern.findall(text))
    return Counter({tuple(table[b] for b in piece.encode("utf-8")): n for piece, n in counts.items()})


def merge(piece, pair):
    """piece (a tuple of tokens) with every occurrence of pair joined, left to right."""
    out, i = [], 0
    while i < len(piece):
        if piece[i:i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(piece[i])
            i += 1
    return tuple(out)


def learn_merges(pieces, n_merges):
    ids = {token: i for i, token in enumerate([*SPECIAL, *sorted(table.values())])}
    merges = []
    for _ in progress(range(n_merges), desc="merges by hand"):
        pairs = Counter()
        for piece, count in pieces.items():
            for pair in zip(piece, piece[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], -ids[pair[0]], -ids[pair[1]]))
        merges.append(best)
        ids.setdefault(best[0] + best[1], len(ids))
        pieces = Counter({merge(piece, best): count for piece, count in pieces.items()})
    return merges


pieces = piece_counts(training_texts)
n_by_hand = 60 if args.quick else 300
start = time.perf_counter()
merges_by_hand = learn_merges(pieces, n_by_hand)
print(f"{len(pieces):,} distinct pieces; {n_by_hand} merges by hand in {time.perf_counter() - start:.1f} s")
print("the first 20:", " ".join(a + "+" + b for a, b in merges_by_hand[:20]))
library = bpe.train(training_texts, 256 + len(SPECIAL) + n_by_hand, special_tokens=SPECIAL)
assert library.merges == merges_by_hand
print(f"tinyattn.preprocessing.bpe.train learns the same {n_by_hand} merges")

# %% [markdown]
# ## Encoding: the merges replayed in the order they were learned
# A new piece starts as its bytes. Among its neighbouring pairs, find the one learned earliest (lowest rank), join it
# (the leftmost where it stands twice), and repeat until no neighbouring pair is a merge. Rank, not frequency,
# decides: the merges are replayed as training made them. The pieces repeat endlessly in any text (' the', '    '),
# so a cache of finished pieces makes encoding fast.
# Exercise: the merge step and this loop, `lessons/exercises/bpe.py` (`python -m lessons check bpe` holds their ids
# to the library's on 1,000 probe strings, as the end of this lesson holds the library's to `tokenizers`).

# %%
vocab_size = 1000 if args.quick else 4000
tokenizer = bpe.train(training_texts, vocab_size, special_tokens=SPECIAL)
ranks = {pair: rank for rank, pair in enumerate(tokenizer.merges)}
ids = tokenizer.vocab
special_pattern = regex.compile("(" + "|".join(regex.escape(t) for t in SPECIAL) + ")")
cache = {}


def encode_piece(piece):
    if piece not in cache:
        parts = [table[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            rank, i = min((ranks.get(pair, np.inf), i) for i, pair in enumerate(zip(parts, parts[1:])))
            if rank == np.inf:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        cache[piece] = parts
    return cache[piece]


def encode(text):
    """text -> ids: special tokens cut out first (never split, never merged), then pieces, then merges."""
    out = []
    for i, stretch in enumerate(special_pattern.split(text)):
        if i % 2:                                           # split's odd items are the special tokens it cut at
            out.append(ids[stretch])
        else:
            out.extend(ids[token] for piece in pattern.findall(stretch) for token in encode_piece(piece))
    return out


print(f"vocabulary of {vocab_size:,}: the last tokens learned {[t for t, _ in sorted(ids.items(), key=lambda x: x[1])[-6:]]}")
for text in ["def attention(query, key, value):", "        return self._weights"]:
    tokens = [tokenizer.id_to_token(i) for i in encode(text)]
    print(f"{text!r}\n  -> {len(tokens)} tokens {tokens}")

# %% [markdown]
# ## Decoding
# Each id back to its token, each character of the token back to its byte, and the bytes read as UTF-8. A token is
# not always a whole character: a vocabulary learned on ASCII code has no token for '注', which is then three tokens
# of one byte each, and one of them alone is no text at all. The bytes that are not UTF-8 become U+FFFD, the
# replacement character '�', as in `tokenizers`: decode every token of a generated text together, never one by one.

# %%
byte_of = {c: b for b, c in table.items()}
token_of = {i: t for t, i in ids.items()}


def decode(token_ids):
    data = bytearray()
    for i in token_ids:
        token = token_of[i]
        if all(c in byte_of for c in token):
            data.extend(byte_of[c] for c in token)
        else:                                   # a special token outside the table (one with a space) is its UTF-8
            data.extend(token.encode("utf-8"))
    return data.decode("utf-8", errors="replace")


chinese = encode("注意")
print(f"'注意' -> ids {chinese}; decoded together {decode(chinese)!r}, the first token alone {decode(chinese[:1])!r}")
assert decode(chinese) == "注意" and decode(chinese[:1]) == "\ufffd"

# %% [markdown]
# ## Special tokens
# `<|endoftext|>` separates documents in GPT-2's training text. It is cut out of the text before the pattern runs, so
# it is one id however the merges go, and no piece of ordinary text can produce it. The other side of that: a text
# that merely contains the string becomes the special id too (in `tokenizers` as here), which is why a chat system
# must keep user text from spelling its control tokens.

# %%
text = "first document<|endoftext|>second<|endoftext"
encoded = encode(text)
print(f"{text!r} -> {[tokenizer.id_to_token(i) for i in encoded]}")
assert encoded.count(ids["<|endoftext|>"]) == 1 and decode(encoded) == text

# %% [markdown]
# ## A file read line by line
# A corpus is often larger than memory, and a file is read a line at a time. Encoding each line by itself is not
# encoding the file: the pattern gives a run of spaces' last space to the word after it, so a line's '\n' and the
# next line's indentation make one piece in the whole text ('\n   ' then ' return') but two line by line. The
# library's `encode_iterable` (in `tinyattn.preprocessing.bpe`, as `Tokenizer`'s) holds back what more text could
# still change, the last few characters and anything that could begin a special token, and gives the ids of the
# whole text while holding only a bounded stretch of it.

# %%
lines = held_out.splitlines(keepends=True)
whole = tokenizer.encode(held_out).ids
line_by_line = [i for line in lines for i in tokenizer.encode(line).ids]
streamed = list(tokenizer.encode_iterable(lines))
print(f"held-out source, {len(lines):,} lines: {len(whole):,} ids whole, {len(line_by_line):,} line by line "
      f"(different ids: {line_by_line != whole}), {len(streamed):,} streamed (the whole text's: {streamed == whole})")
assert streamed == whole and line_by_line != whole

# %% [markdown]
# ## What a bigger vocabulary buys
# Bytes per token on the held-out modules, for vocabularies from 300 to several thousand tokens trained on the same
# text: each merge saves the most where the text repeats most, so the first few hundred merges (indentation, ' self',
# 'return') buy the most and later ones less and less. Beside it, the eleven-language sentence: a vocabulary learned
# on English and code has merged nothing in Cyrillic, Devanagari or Chinese, which stay at one byte per token: two
# tokens per Cyrillic letter, three per Chinese character.

# %%
def bytes_per_token(model, text):
    return len(text.encode("utf-8")) / len(model.encode(text).ids)


sizes = [300, 500, 1000] + ([] if args.quick else [2000, 4000, 8000])
models = {size: bpe.train(training_texts, size, special_tokens=SPECIAL) for size in sizes}
groups = {"English": ["English"], "German, French, Spanish": ["German", "French", "Spanish"],
          "the seven in other scripts": list(SENTENCE)[4:]}
curves = {"held-out Python source": [bytes_per_token(models[size], held_out) for size in sizes]}
for name, languages in groups.items():
    text = " ".join(SENTENCE[language] for language in languages)
    curves[name] = [bytes_per_token(models[size], text) for size in sizes]
for name, values in curves.items():
    print(f"{name:26} bytes per token " + "  ".join(f"{size}: {v:.2f}" for size, v in zip(sizes, values)))
viz.save(viz.curves({name: (np.array(sizes), values) for name, values in curves.items()}, xlabel="vocabulary size",
                    ylabel="bytes per token", title="BPE learned on Python source: compression"),
         plot_path(args, "21_bpe_compression.png"))
held_out_bytes_per_token = curves["held-out Python source"][sizes.index(vocab_size)]
assert all(a < b for a, b in zip(curves["held-out Python source"], curves["held-out Python source"][1:]))

# %% [markdown]
# ## Numbers, code, and other languages
# **Numbers.** The pattern keeps a run of digits together and BPE then chunks it by what was frequent in training,
# not by place value. Python's source holds few numbers, and its vocabulary cuts them into whatever single digits,
# pairs and triples the source happened to hold (the first line below). A small vocabulary learned on numbers alone
# shows what a web-trained one does: 3,000 years from 1990 to 2024 and 1,000 random numbers
# below a million. '2024' becomes one token and '2025', a year the text never held, '202' + '5'; long numbers split
# into chunks that follow no place value, and differ with the seed. A model must learn arithmetic over such chunks.
# Later tokenizers changed the pattern for this reason: GPT-4's takes at most three digits per piece (`\p{N}{1,3}`),
# Llama's splits every digit.
#
# **Code.** Indentation is runs of spaces, and a vocabulary learned on code merges them: eight spaces before
# `return` cost a token or two, not eight. (GPT-2's vocabulary, learned on web text, has few such runs; Codex and
# later models added them.)
#
# **Other languages.** The same sentence costs far more tokens outside English: the model's context holds less of
# it, every step of generation writes less of it, and a price per token charges more for it (Petrov et al. 2023,
# "Language Model Tokenizers Introduce Unfairness Between Languages").

# %%
print(f"'2024 1234567' in the Python-source vocabulary: {[tokenizer.id_to_token(i) for i in encode('2024 1234567')]}")
rng = np.random.default_rng(args.seed)
numbers = bpe.train([str(n) for n in [*rng.integers(1990, 2025, 3000), *rng.integers(0, 1_000_000, 1000)]], 356)
for number in ["2024", "2025", "1999", "1234567", "100000", "3000"]:
    print(f"{number!r:10} -> {numbers.encode(number).tokens}")
assert len(numbers.encode("2024").ids) == 1 < len(numbers.encode("2025").ids)
indent = encode("        return")
print(f"8 spaces + 'return' -> {[tokenizer.id_to_token(i) for i in indent]}")
assert len(indent) <= 3
english_tokens = len(encode(SENTENCE["English"]))
print(f"the sentence in tokens (vocabulary of {vocab_size:,} learned on Python source):")
language_tokens = {}
for language, text in SENTENCE.items():
    language_tokens[language] = len(encode(text))
    print(f"  {language:9} {language_tokens[language]:4} tokens ({language_tokens[language] / english_tokens:.1f}x "
          f"English), {len(text.encode('utf-8')) / language_tokens[language]:.2f} bytes per token")
assert all(language_tokens[x] >= 1.5 * english_tokens for x in list(SENTENCE)[4:])   # the scripts beyond Latin

# %% [markdown]
# ## The same tokenizer as Hugging Face's
# Hugging Face's `tokenizers` (in Rust) trains a byte-level BPE on the same text, set up as its ByteLevelBPETokenizer
# is: the same vocabulary and the same merges in the same order, ties included. Its tokenizer.json is then read back
# two ways, by `tokenizers` and by the encoder of this lesson, and both encode 1,000 strings drawn (seed fixed) to be
# hard: letters of ten scripts, emoji made of several code points (joiners, skin tones, flags), runs of spaces and
# newlines, digits of several scripts, contractions with straight and curly apostrophes, code, and special tokens
# where they are whole, cut off, or glued to other text. Every id must agree, and every decoded string must be the
# text it came from. `Tokenizer.from_pretrained(folder, backend="python")`, the library's version of this
# lesson's code, is held to the same.

# %%
theirs = tokenizers.Tokenizer(tokenizers.models.BPE())
theirs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
theirs.decoder = decoders.ByteLevel()
theirs.post_processor = processors.ByteLevel(trim_offsets=False)
theirs.train_from_iterator(training_texts, trainers.BpeTrainer(
    vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
folder = os.path.join(args.plots, "21_tokenizer")
os.makedirs(folder, exist_ok=True)
theirs.save(os.path.join(folder, "tokenizer.json"))
read_back = bpe.ByteLevelBPE.from_file(os.path.join(folder, "tokenizer.json"))
merges_identical = read_back.merges == tokenizer.merges and read_back.vocab == tokenizer.vocab
print(f"tokenizers' trainer and this lesson's: {len(tokenizer.merges):,} merges, identical: {merges_identical}")
assert merges_identical

strings = probe_strings(1000, seed=args.seed, special_tokens=SPECIAL)
texts = [text for _, text in strings]
reference = [encoding.ids for encoding in theirs.encode_batch(texts)]
ours = [encode(text) for text in texts]
matches = [a == b for a, b in zip(ours, reference)]
roundtrips = [decode(ids_) == text for ids_, text in zip(ours, texts)]
for category in CATEGORIES:
    picked = [i for i, (c, _) in enumerate(strings) if c == category]
    example = texts[picked[0]]
    print(f"{category:15} {len(picked)} strings, ids equal in {sum(matches[i] for i in picked)}, decoded back "
          f"exactly {sum(roundtrips[i] for i in picked)}; e.g. {example[:40]!r} -> {len(ours[picked[0]])} tokens")
bpe_ids_match, bpe_roundtrip = float(np.mean(matches)), float(np.mean(roundtrips))
python_backend = Tokenizer.from_pretrained(folder, backend="python")
assert [python_backend.encode(text) for text in texts] == reference
print(f"ids equal on {bpe_ids_match:.1%} of the strings, decoded back exactly {bpe_roundtrip:.1%}; "
      "Tokenizer(backend='python') equal on all")
assert bpe_ids_match == 1.0 and bpe_roundtrip == 1.0

# %% [markdown]
# ## GPT-2's own tokenizer
# With `--weights gpt2` (after `pip install -e ".[hub]"`) or `--weights FOLDER` holding its tokenizer.json, the
# library's python backend reads GPT-2's 50,000 merges and is held to `tokenizers` on the same strings; then the
# sentence in GPT-2's tokens. GPT-2's vocabulary was learned on 40 GB of web pages that Reddit users linked to,
# mostly English: the other languages fare better than on Python source, and still far worse than English.

# %%
gpt2_ids_match = None
if args.weights is None:
    print("GPT-2's tokenizer not read. To: pip install -e \".[hub]\" && python -m lessons 21 --weights gpt2")
else:
    gpt2_python = Tokenizer.from_pretrained(args.weights, backend="python")
    gpt2_ids_match = float(np.mean([gpt2_python.encode(t) == gpt2_tokenizer.encode(t) for t in texts]))
    print(f"{args.weights}, {gpt2_python.vocab_size:,} tokens: the python backend and tokenizers agree on "
          f"{gpt2_ids_match:.1%} of the strings")
    gpt2_english = len(gpt2_python.encode(SENTENCE["English"]))
    for language, text in SENTENCE.items():
        n = len(gpt2_python.encode(text))
        print(f"  {language:9} {n:4} tokens ({n / gpt2_english:.1f}x English)")

# %%
print(f"the whole run took {time.perf_counter() - started:.0f} s")
report(bpe_ids_match=bpe_ids_match, bpe_roundtrip=bpe_roundtrip, bytes_per_token=held_out_bytes_per_token,
       merges_identical=merges_identical, merges_by_hand=n_by_hand, vocab_size=vocab_size,
       chinese_tokens_vs_english=language_tokens["Chinese"] / english_tokens,
       **({} if gpt2_ids_match is None else {"gpt2_ids_match": gpt2_ids_match}))
