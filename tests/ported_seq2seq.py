"""The attention translator of PyTorch's tutorial "NLP From Scratch: Translation with a Sequence to Sequence Network
and Attention" (a GRU encoder, a decoder that attends over the encoder's outputs, the training step on one sentence
pair and greedy decoding), told in this project's words with the same PyTorch surface the tutorial uses, one word at
a time as it goes. Only the import lines differ from PyTorch code (`import torch`, `import torch.nn as nn`,
`from torch import optim`, `import torch.nn.functional as F`). The tutorial reads French-English pairs from a file;
tests/test_port_pytorch_code.py makes pairs of its own and trains on them."""
import random

import tinyattn as torch
import tinyattn.nn as nn
from tinyattn import optim
import tinyattn.nn.functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

SOS_token = 0
EOS_token = 1
MAX_LENGTH = 6


class Lang:
    """A vocabulary built from sentences: word -> index, index -> word, and how often each word came."""

    def __init__(self, name):
        self.name = name
        self.word2index, self.word2count = {}, {}
        self.index2word = {SOS_token: "SOS", EOS_token: "EOS"}
        self.n_words = 2

    def addSentence(self, sentence):
        for word in sentence.split(" "):
            if word not in self.word2index:
                self.word2index[word] = self.n_words
                self.index2word[self.n_words] = word
                self.n_words += 1
            self.word2count[word] = self.word2count.get(word, 0) + 1


def tensorFromSentence(lang, sentence):
    """The sentence's word indices, then EOS, as a (length, 1) column of longs."""
    ids = [lang.word2index[word] for word in sentence.split(" ")] + [EOS_token]
    return torch.tensor(ids, dtype=torch.long, device=device).view(-1, 1)


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)

    def forward(self, input, hidden):
        word = self.embedding(input).view(1, 1, -1)           # one word: (seq 1, batch 1, features)
        output, hidden = self.gru(word, hidden)
        return output, hidden

    def initHidden(self):
        return torch.zeros(1, 1, self.hidden_size, device=device)


class AttnDecoderRNN(nn.Module):
    """Each step weighs the encoder's outputs by a softmax over max_length slots, computed from the word it reads
    and its hidden state, and feeds the weighted sum, with the word, through the GRU."""

    def __init__(self, hidden_size, output_size, dropout_p=0.1, max_length=MAX_LENGTH):
        super(AttnDecoderRNN, self).__init__()
        self.hidden_size, self.output_size = hidden_size, output_size
        self.dropout_p, self.max_length = dropout_p, max_length
        self.embedding = nn.Embedding(self.output_size, self.hidden_size)
        self.attn = nn.Linear(self.hidden_size * 2, self.max_length)
        self.attn_combine = nn.Linear(self.hidden_size * 2, self.hidden_size)
        self.dropout = nn.Dropout(self.dropout_p)
        self.gru = nn.GRU(self.hidden_size, self.hidden_size)
        self.out = nn.Linear(self.hidden_size, self.output_size)

    def forward(self, input, hidden, encoder_outputs):
        word = self.dropout(self.embedding(input).view(1, 1, -1))
        attn_weights = F.softmax(self.attn(torch.cat((word[0], hidden[0]), 1)), dim=1)
        context = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = self.attn_combine(torch.cat((word[0], context[0]), 1)).unsqueeze(0)
        output, hidden = self.gru(F.relu(output), hidden)
        output = F.log_softmax(self.out(output[0]), dim=1)
        return output, hidden, attn_weights

    def initHidden(self):
        return torch.zeros(1, 1, self.hidden_size, device=device)


def train(input_tensor, target_tensor, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion,
          teacher_forcing_ratio=0.5, max_length=MAX_LENGTH):
    """One optimiser step on one sentence pair; returns the loss per target word."""
    encoder_hidden = encoder.initHidden()
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    input_length, target_length = input_tensor.size(0), target_tensor.size(0)
    encoder_outputs = torch.zeros(max_length, encoder.hidden_size, device=device)
    loss = 0
    for ei in range(input_length):
        encoder_output, encoder_hidden = encoder(input_tensor[ei], encoder_hidden)
        encoder_outputs[ei] = encoder_output[0, 0]
    decoder_input = torch.tensor([[SOS_token]], device=device)
    decoder_hidden = encoder_hidden
    if random.random() < teacher_forcing_ratio:              # read the right word next, whatever was predicted
        for di in range(target_length):
            decoder_output, decoder_hidden, decoder_attention = decoder(decoder_input, decoder_hidden,
                                                                        encoder_outputs)
            loss += criterion(decoder_output, target_tensor[di])
            decoder_input = target_tensor[di]
    else:                                                    # read its own best guess, and stop at EOS
        for di in range(target_length):
            decoder_output, decoder_hidden, decoder_attention = decoder(decoder_input, decoder_hidden,
                                                                        encoder_outputs)
            topv, topi = decoder_output.topk(1)
            decoder_input = topi.squeeze().detach()
            loss += criterion(decoder_output, target_tensor[di])
            if decoder_input.item() == EOS_token:
                break
    loss.backward()
    encoder_optimizer.step()
    decoder_optimizer.step()
    return loss.item() / target_length


def trainIters(encoder, decoder, pairs, input_lang, output_lang, n_iters, print_every=100, learning_rate=0.01):
    """n_iters steps of SGD on pairs drawn at random; prints and returns the average loss of every print_every."""
    encoder_optimizer = optim.SGD(encoder.parameters(), lr=learning_rate)
    decoder_optimizer = optim.SGD(decoder.parameters(), lr=learning_rate)
    chosen = [random.choice(pairs) for _ in range(n_iters)]
    training_pairs = [(tensorFromSentence(input_lang, a), tensorFromSentence(output_lang, b)) for a, b in chosen]
    criterion = nn.NLLLoss()
    averages, total = [], 0
    for iter in range(1, n_iters + 1):
        input_tensor, target_tensor = training_pairs[iter - 1]
        total += train(input_tensor, target_tensor, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion)
        if iter % print_every == 0:
            averages.append(total / print_every)
            print("(%d %d%%) %.4f" % (iter, iter / n_iters * 100, averages[-1]))
            total = 0
    return averages


def evaluate(encoder, decoder, sentence, input_lang, output_lang, max_length=MAX_LENGTH):
    """Greedy translation: the decoded words (ending in <EOS> when it stops) and the attention of each step."""
    with torch.no_grad():
        input_tensor = tensorFromSentence(input_lang, sentence)
        input_length = input_tensor.size()[0]
        encoder_hidden = encoder.initHidden()
        encoder_outputs = torch.zeros(max_length, encoder.hidden_size, device=device)
        for ei in range(input_length):
            encoder_output, encoder_hidden = encoder(input_tensor[ei], encoder_hidden)
            encoder_outputs[ei] += encoder_output[0, 0]
        decoder_input = torch.tensor([[SOS_token]], device=device)
        decoder_hidden = encoder_hidden
        decoded_words = []
        decoder_attentions = torch.zeros(max_length, max_length)
        for di in range(max_length):
            decoder_output, decoder_hidden, decoder_attention = decoder(decoder_input, decoder_hidden,
                                                                        encoder_outputs)
            decoder_attentions[di] = decoder_attention.data
            topv, topi = decoder_output.data.topk(1)
            if topi.item() == EOS_token:
                decoded_words.append("<EOS>")
                break
            decoded_words.append(output_lang.index2word[topi.item()])
            decoder_input = topi.squeeze().detach()
        return decoded_words, decoder_attentions[:di + 1]
