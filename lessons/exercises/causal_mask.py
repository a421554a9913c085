"""Exercise · the causal mask, and padding.                                     Lesson 03, "Masking".

A language model must not read the future: query i may attend to key j only when j <= i. A batch of sequences of
different lengths is padded to one length, and no query may attend to a padding key. Both are boolean masks,
True where attention is allowed (as in PyTorch), combined with &.

Shapes
    causal_mask(query_len, key_len, offset=0) -> (query_len, key_len) bool: True where j <= i + offset.
        offset 0 is PyTorch's is_causal (queries and keys start together). With a KV cache the queries are the
        last query_len of key_len positions: offset = key_len - query_len.
    padding_mask(lengths, key_len) -> (B, 1, 1, key_len) bool: True where j < lengths[b]; the two size-1 dims
        broadcast over heads and queries.
    Return NumPy arrays (np.arange, comparisons, broadcasting): no loops needed.

What to think through
    Which (i, j) does the KV-cache offset allow? A query at absolute position key_len - query_len + i.
    Why does a padded sequence attend exactly as the same sequence cut to its length?

Check it:    python -m lessons check causal_mask
"""
import numpy as np


def causal_mask(query_len, key_len, offset=0):
    # TODO: compare a column of query indices with a row of key indices.
    raise NotImplementedError("not implemented yet")


def padding_mask(lengths, key_len):
    # TODO: key positions against each sequence's length, then the two size-1 dims.
    raise NotImplementedError("not implemented yet")
