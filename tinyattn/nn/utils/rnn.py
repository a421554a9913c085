"""torch.nn.utils.rnn's names: padded batches with their lengths, for the RNN layers of tinyattn/nn/rnn.py."""
from ..rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence  # noqa: F401
