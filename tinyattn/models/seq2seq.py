"""RNN encoder-decoders: the fixed-context bottleneck (Cho et al. 2014; Sutskever et al. 2014) and the attention
that removed it (Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly Learning to Align and
Translate").

Seq2Seq squeezes the whole source into the encoder's final state c and decodes from c alone. Seq2SeqAttention keeps
every encoder state h_i; at each output step t the decoder scores e_{t,i} = v^T tanh(W s_{t-1} + U h_i), turns them
into weights a_{t,i} = softmax_i(e_{t,i}) and reads a fresh context c_t = sum_i a_{t,i} h_i. The weights are the
alignment the lessons plot.
"""
from dataclasses import dataclass

from .. import backend, ops
from ..tensor import Tensor, as_array, no_grad
from .. import nn


@dataclass
class Seq2SeqConfig:
    src_vocab: int
    tgt_vocab: int
    embed_dim: int = 32
    hidden: int = 64
    attention_dim: int = 64
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2


class Encoder(nn.Module):
    """Embedding + GRU over a right-padded source; bidirectional=True adds a GRU that reads each sentence backwards
    from its own last word (PyTorch's pack_padded_sequence idiom: the padding is never read)."""

    def __init__(self, vocab, embed_dim, hidden, pad_id, bidirectional):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(embed_dim, hidden, batch_first=True, bidirectional=bidirectional)
        self.pad_id = pad_id

    def forward(self, src):
        """Returns annotations (B, S, H or 2H) and each sentence's final forward state (B, H)."""
        src = as_array(src)
        lengths = (src != self.pad_id).sum(axis=1)
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(src), lengths, batch_first=True, enforce_sorted=False)
        outputs, finals = self.rnn(packed)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True, total_length=src.shape[1])
        return outputs, finals[0]          # the forward direction's state after each sentence's last real word


class Seq2Seq(nn.Module):
    """GRU encoder-decoder whose decoder sees the source only through the final encoder state (the bottleneck)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config.src_vocab, config.embed_dim, config.hidden, config.pad_id, False)
        self.embed = nn.Embedding(config.tgt_vocab, config.embed_dim)
        self.cell = nn.GRUCell(config.embed_dim + config.hidden, config.hidden)   # input: [y_{t-1}; c]
        self.out = nn.Linear(2 * config.hidden, config.tgt_vocab)

    def start(self, src):
        _, context = self.encoder(src)
        return {"context": context, "state": context}

    def step(self, memory, prev_ids):
        """One decoder step: logits for the next token, and None (there are no attention weights)."""
        context = memory["context"]
        state = self.cell(ops.cat([self.embed(prev_ids), context], dim=-1), memory["state"])
        memory["state"] = state
        return self.out(ops.cat([state, context], dim=-1)), None

    def forward(self, src, tgt_in):
        """Teacher forcing: logits (B, T, V) for every position of tgt_in, and the weights (None here)."""
        return _decode_teacher_forced(self, src, tgt_in)

    def greedy_decode(self, src, max_len):
        return _greedy(self, src, max_len)


class AttentionDecoder(nn.Module):
    """A GRU decoder that attends over annotations at every step (Bahdanau): the core of Seq2SeqAttention and of the
    image captioner (which attends over image patches instead of words)."""

    def __init__(self, vocab, embed_dim, hidden, annotation_dim, attention_dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim)
        self.attention = nn.AdditiveAttention(hidden, annotation_dim, attention_dim)
        self.init_state = nn.Linear(annotation_dim, hidden)
        self.cell = nn.GRUCell(embed_dim + annotation_dim, hidden)          # input: [y_{t-1}; c_t]
        self.out = nn.Linear(hidden + annotation_dim + embed_dim, vocab)   # deep output from [s_t; c_t; y_{t-1}]

    def start(self, annotations, mask):
        """State for the first step: s_0 = tanh(W mean(annotations)), and W_k h_i precomputed once."""
        keep = Tensor(mask[..., None].astype(annotations.dtype))
        mean = (annotations * keep).sum(dim=1) / keep.sum(dim=1)
        return {"annotations": annotations, "mask": mask, "key_proj": self.attention.project_keys(annotations),
                "state": ops.tanh(self.init_state(mean))}

    def step(self, memory, prev_ids):
        """e_{t,i} = v^T tanh(W s_{t-1} + U h_i); c_t = sum_i softmax(e)_i h_i; s_t = GRU([y_{t-1}; c_t], s_{t-1})."""
        annotations = memory["annotations"]
        context, weights = self.attention(memory["state"], annotations, annotations, mask=memory["mask"],
                                          key_proj=memory["key_proj"])
        embedded = self.embed(prev_ids)
        state = self.cell(ops.cat([embedded, context], dim=-1), memory["state"])
        memory["state"] = state
        return self.out(ops.cat([state, context, embedded], dim=-1)), weights


class Seq2SeqAttention(nn.Module):
    """Bidirectional GRU encoder + attention decoder: every output step reads its own context c_t."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config.src_vocab, config.embed_dim, config.hidden, config.pad_id, True)
        self.decoder = AttentionDecoder(config.tgt_vocab, config.embed_dim, config.hidden, 2 * config.hidden,
                                        config.attention_dim)

    def start(self, src):
        annotations, _ = self.encoder(src)
        return self.decoder.start(annotations, as_array(src) != self.config.pad_id)

    def step(self, memory, prev_ids):
        return self.decoder.step(memory, prev_ids)

    def forward(self, src, tgt_in):
        """Teacher forcing: logits (B, T, V) and attention weights (B, T, S)."""
        return _decode_teacher_forced(self, src, tgt_in)

    def greedy_decode(self, src, max_len):
        return _greedy(self, src, max_len)


def _decode_teacher_forced(model, src, tgt_in):
    """Run model.step over every position of tgt_in (the gold previous tokens); stack logits and weights."""
    tgt_in = as_array(tgt_in)
    memory = model.start(src)
    logits, weights = [], []
    for t in range(tgt_in.shape[1]):
        step_logits, step_weights = model.step(memory, tgt_in[:, t])
        logits.append(step_logits)
        weights.append(step_weights)
    stacked = ops.stack(weights, dim=1) if weights[0] is not None else None
    return ops.stack(logits, dim=1), stacked


@no_grad()
def _greedy(model, src, max_len):
    """Feed back the most likely token each step, starting from BOS. Returns ids (B, max_len) and the attention
    weights (B, max_len, S) or None. Rows keep going after EOS; cut them with the EOS id."""
    xp = backend.xp_of(as_array(src))
    memory = model.start(src)
    prev = xp.full(src.shape[0], model.config.bos_id, dtype=backend.int64)
    ids, weights = [], []
    for _ in range(max_len):
        logits, step_weights = model.step(memory, prev)
        prev = logits.array.argmax(axis=-1)
        ids.append(prev)
        weights.append(step_weights)
    stacked = ops.stack(weights, dim=1) if weights[0] is not None else None
    return Tensor(xp.stack(ids, axis=1)), stacked
