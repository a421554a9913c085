"""PyTorch code runs after changing only its imports: tests/ported_gpt.py is a GPT in plain PyTorch idiom (the nanoGPT
shape: ModuleDict, tied weights, apply(init), param groups by dim, topk + multinomial sampling, a nested
checkpoint). Here it trains, samples, saves and resumes, also written as PyTorch training scripts are. Three more
sources, told in this project's words with the PyTorch surface each uses and only their imports changed (issue 46):
tests/ported_seq2seq.py (PyTorch's seq2seq translation tutorial), tests/ported_llm_gpt.py (the GPT of an "LLMs from
scratch" book, chapters 2-5) and tests/ported_mingpt.py (minGPT's model.py)."""
import math
from dataclasses import asdict

import numpy as np

import tinyattn as torch
from ported_gpt import GPT, Config


device = str(torch.get_default_device())         # the device the suite runs on (TINYATTN_DEVICE)


def batch(generator, config, size=8):
    """Sequences that count upwards (mod vocab) from a random start: the next token is always the last plus one."""
    start = generator.integers(0, config.vocab_size, size=(size, 1))
    ids = (start + np.arange(config.block_size + 1)) % config.vocab_size
    x = torch.from_numpy(ids[:, :-1].astype(np.int64)).to(device)
    y = torch.from_numpy(ids[:, 1:].astype(np.int64)).to(device)
    return x, y


def test_the_ported_gpt_trains_samples_and_resumes(tmp_path):
    torch.manual_seed(0)
    config = Config()
    model = GPT(config)
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-2, betas=(0.9, 0.95), device_type=device)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=150)
    generator = np.random.default_rng(0)
    losses = []
    for step in range(150):
        x, y = batch(generator, config)
        logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < 0.5 * losses[0]
    assert model.get_num_params() == sum(p.numel() for p in model.parameters()) - config.block_size * config.n_embd

    model.eval()
    prompt = torch.tensor([[3, 4, 5]], device=device)
    sample = model.generate(prompt, max_new_tokens=6, temperature=0.5, top_k=3)
    assert sample.shape == (1, 9) and sample[:, :3].tolist() == [[3, 4, 5]]
    assert sample[0, 3].item() == 6                           # it learned to count

    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": 150,
                "config": asdict(config)}, path)
    checkpoint = torch.load(path, map_location=device)
    resumed = GPT(Config(**checkpoint["config"]))
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer = resumed.configure_optimizers(0.1, 1e-2, (0.9, 0.95), device)
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    assert checkpoint["iter_num"] == 150
    resumed.eval()
    x, _ = batch(generator, config)
    np.testing.assert_array_equal(resumed(x)[0].numpy(), model(x)[0].numpy())


def test_fast_and_written_out_attention_agree():
    torch.manual_seed(1)
    config = Config()
    fast, manual = GPT(config, fast=True).double(), GPT(config, fast=False).double()
    manual.load_state_dict(fast.state_dict(), strict=False)   # the written-out one adds a mask buffer
    x, y = batch(np.random.default_rng(1), config, size=3)
    (_, fast_loss), (_, manual_loss) = fast(x, y), manual(x, y)
    np.testing.assert_allclose(fast_loss.item(), manual_loss.item(), rtol=1e-12)


# -- three more PyTorch sources, each with only its imports changed (issue 46) -------------------------------------
def test_the_seq2seq_tutorials_attention_translator_learns_generated_pairs(capsys):
    """Pairs from a made-up language: each word has one translation, and the sentence comes out reversed, so the
    decoder must attend to the right source word at each step."""
    import random
    import ported_seq2seq as s2s
    random.seed(0)
    torch.manual_seed(0)
    words = ["je", "tu", "il", "nous", "vous", "ils"]
    rng = random.Random(1)
    pairs = []
    for _ in range(40):
        source = [rng.choice(words) for _ in range(rng.randint(1, 4))]
        pairs.append((" ".join(source), " ".join(w.upper() for w in reversed(source))))
    input_lang, output_lang = s2s.Lang("made-up"), s2s.Lang("reversed")
    for a, b in pairs:
        input_lang.addSentence(a)
        output_lang.addSentence(b)
    encoder = s2s.EncoderRNN(input_lang.n_words, 32).to(s2s.device)
    decoder = s2s.AttnDecoderRNN(32, output_lang.n_words, dropout_p=0.1).to(s2s.device)
    averages = s2s.trainIters(encoder, decoder, pairs, input_lang, output_lang, 600, print_every=100,
                              learning_rate=0.05)
    assert averages[-1] < 0.4 * averages[0]
    assert capsys.readouterr().out.splitlines()[-1].startswith("(600 100%) ")        # the tutorial's progress lines
    encoder.eval()
    decoder.eval()
    right = 0
    for a, b in pairs:
        decoded, attentions = s2s.evaluate(encoder, decoder, a, input_lang, output_lang)
        assert attentions.shape == (len(decoded), s2s.MAX_LENGTH)
        np.testing.assert_allclose(attentions.numpy().sum(axis=1), 1, rtol=1e-5)     # each step's weights sum to 1
        right += decoded == b.split(" ") + ["<EOS>"]
    assert right >= 0.6 * len(pairs), f"{right} of {len(pairs)} pairs translated"


class CharTokenizer:
    """Stands in for tiktoken in the book's code: encode() and decode() over single characters."""

    def __init__(self, text):
        self.chars = sorted(set(text))

    def encode(self, text):
        return [self.chars.index(c) for c in text]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


def test_the_books_gpt_trains_with_its_dataloader_and_samples(tmp_path, capsys):
    import ported_llm_gpt as book
    text = "every effort moves you on. " * 24          # 27 characters: windows start all over it
    tokenizer = CharTokenizer(text)
    cfg = {"vocab_size": len(tokenizer.chars), "context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2,
           "drop_rate": 0.1, "qkv_bias": False}
    torch.manual_seed(123)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = book.GPTModel(cfg)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.1)
    split_idx = int(0.9 * len(text))
    train_loader = book.create_dataloader_v1(text[:split_idx], tokenizer, batch_size=4, max_length=16, stride=16,
                                             drop_last=True, shuffle=True)
    val_loader = book.create_dataloader_v1(text[split_idx:], tokenizer, batch_size=4, max_length=16, stride=16,
                                           drop_last=False, shuffle=False)
    assert len(train_loader.dataset) == math.ceil((split_idx - 16) / 16) and len(train_loader) == 36 // 4
    assert len(val_loader) == 1
    train_losses, val_losses, tokens_seen = book.train_model_simple(
        model, train_loader, val_loader, optimizer, device, num_epochs=15, eval_freq=5, eval_iter=1,
        start_context="every effort", tokenizer=tokenizer)
    assert train_losses[-1] < 0.3 * train_losses[0] and val_losses[-1] < 0.3 * val_losses[0]
    assert tokens_seen[-1] == tokens_seen[0] + 16 * 4 * 5 * (len(tokens_seen) - 1)
    log = capsys.readouterr().out.splitlines()
    assert log[0].startswith("Ep 1 (Step 000000): Train loss ") and "every effort moves you" in log[-1]

    model.eval()
    prompt = book.text_to_token_ids("every effort m", tokenizer).to(device)
    greedy = book.generate(model, prompt, max_new_tokens=10, context_size=cfg["context_length"])
    assert book.token_ids_to_text(greedy, tokenizer) == "every effort moves you o"
    assert torch.equal(greedy, book.generate_text_simple(model, prompt, 10, cfg["context_length"]))
    stop = tokenizer.encode(".")[0]
    stopped = book.generate(model, book.text_to_token_ids("moves you o", tokenizer), 10, 16, eos_id=stop)
    assert book.token_ids_to_text(stopped, tokenizer) == "moves you on"                  # stops before the "."
    torch.manual_seed(5)
    sampled = book.generate(model, prompt, 10, 16, temperature=1.4, top_k=3)
    torch.manual_seed(5)
    assert torch.equal(sampled, book.generate(model, prompt, 10, 16, temperature=1.4, top_k=3))
    assert torch.equal(book.generate(model, prompt, 10, 16, temperature=1.0, top_k=1), greedy)   # top-1 is greedy

    torch.save(model.state_dict(), tmp_path / "model.pth")
    loaded = book.GPTModel(cfg)
    loaded.load_state_dict(torch.load(tmp_path / "model.pth"))
    loaded.eval()
    assert torch.equal(loaded(prompt), model(prompt))


class TrainConfig:
    weight_decay, learning_rate, betas = 0.1, 3e-3, (0.9, 0.95)


def test_mingpt_trains_with_its_parameter_groups():
    import ported_mingpt as mingpt
    torch.manual_seed(0)
    config = mingpt.GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = mingpt.GPT(config)
    optimizer = model.configure_optimizers(TrainConfig())
    decayed, kept = optimizer.param_groups
    linear_weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(decayed["params"]) == len(linear_weights) == 2 * 6 + 1 and decayed["weight_decay"] == 0.1
    assert len(decayed["params"]) + len(kept["params"]) == len(list(model.parameters()))
    assert any(p is model.pos_emb for p in kept["params"]) and kept["weight_decay"] == 0.0
    assert torch.equal(model.blocks[0].ln1.weight, torch.ones(32)) and model.head.bias is None

    generator = np.random.default_rng(0)
    losses = []
    for _ in range(120):
        x, y = batch(generator, config)
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
    model.eval()
    idx = torch.tensor([[5, 6, 7]], device=device)
    with torch.no_grad():
        for _ in range(4):
            logits, _ = model(idx[:, -model.get_block_size():])
            _, next_id = torch.topk(logits[:, -1, :], k=1, dim=-1)
            idx = torch.cat((idx, next_id), dim=1)
    assert idx.tolist() == [[5, 6, 7, 8, 9, 10, 11]]                                    # it learned to count
