"""PyTorch code runs after changing only its imports: tests/ported_gpt.py is a GPT in plain PyTorch idiom (the nanoGPT
shape: ModuleDict, tied weights, apply(init), param groups by dim, topk + multinomial sampling, a nested
checkpoint). Here it trains, samples, saves and resumes, also written as PyTorch training scripts are."""
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
