"""Solution · the causal mask, and padding (lesson 03)."""
import numpy as np


def causal_mask(query_len, key_len, offset=0):
    rows = np.arange(query_len)[:, None]
    cols = np.arange(key_len)[None, :]
    return cols <= rows + offset


def padding_mask(lengths, key_len):
    lengths = np.asarray(lengths)
    return (np.arange(key_len) < lengths[:, None])[:, None, None, :]
