"""Character and word vocabularies with the reserved ids every model here expects, and batching helpers."""
import numpy

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


class Vocab:
    """Maps tokens to ids and back; ids 0, 1, 2 are padding, begin and end of sequence."""

    def __init__(self, tokens):
        self.itos = [PAD, BOS, EOS] + sorted(set(tokens) - {PAD, BOS, EOS})
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2

    def __len__(self):
        return len(self.itos)

    def encode(self, tokens, bos=False, eos=False):
        unknown = [t for t in tokens if t not in self.stoi]
        if unknown:
            raise KeyError(f"tokens not in the vocabulary: {unknown[:5]}")
        return ([self.bos_id] if bos else []) + [self.stoi[t] for t in tokens] + ([self.eos_id] if eos else [])

    def decode(self, ids, sep=""):
        """Tokens up to the first EOS, padding and BOS dropped, joined by sep."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.itos[i])
        return sep.join(out)


def pad_batch(sequences, pad_id=0, length=None):
    """Right-pad lists of ids into an int64 array (B, length or the longest)."""
    length = length or max(len(s) for s in sequences)
    out = numpy.full((len(sequences), length), pad_id, dtype=numpy.int64)
    for row, s in zip(out, sequences):
        row[:len(s)] = s
    return out


def batches(n, batch_size, rng=None):
    """Index arrays covering range(n) in batches; shuffled when an rng is given."""
    order = rng.permutation(n) if rng is not None else numpy.arange(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]
