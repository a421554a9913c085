"""nanoGPT's train.py, its data-parallel path, cut to a few steps: the imports changed to tinyattn's and, on the CPU,
its two CUDA lines set for the CPU (marked `# on the CPU`); the rest is the script's own logic. Its batches come from
a fixed token array, chosen by the step and the micro step's place in the whole batch, so that 2 ranks and one process
see the same whole batch. tests/test_distributed.py runs it both ways and compares the weights it writes.

    python -m tinyattn.distributed.run --nproc-per-node 2 tests/ported_ddp_train.py OUT.npz
"""
import os
import sys
from contextlib import nullcontext

import numpy as np

import tinyattn as torch
from tinyattn.distributed import destroy_process_group, init_process_group
from tinyattn.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(__file__))
from ported_gpt import GPT, Config  # noqa: E402

out_path = sys.argv[1]
batch_size = 2
block_size = 16
gradient_accumulation_steps = 4          # over all ranks, as in nanoGPT
max_iters = 3
eval_iters = 2
learning_rate, weight_decay, beta1, beta2, grad_clip = 1e-2, 1e-1, 0.9, 0.95, 1.0
backend = "gloo"
device = "cpu"
torch.set_default_dtype(torch.float64)    # so that 2 ranks and one process agree to rounding

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = "cpu"                        # on the CPU; nanoGPT: device = f'cuda:{ddp_local_rank}'
    # on the CPU, no line here; nanoGPT: torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1
    ddp_rank = 0
torch.manual_seed(1337 + seed_offset)     # a different start on each rank: DDP broadcasts rank 0's
ctx = nullcontext()

config = Config(block_size=block_size, vocab_size=32, n_layer=2, n_head=2, n_embd=16)
data = np.random.default_rng(0).integers(0, config.vocab_size, 4000)


def get_batch(iter_num, micro_step):
    whole = ddp_rank * gradient_accumulation_steps + micro_step     # its place among all ranks' micro steps
    ix = np.random.default_rng([iter_num + 1, whole]).integers(0, len(data) - block_size, batch_size)
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)


model = GPT(config)
model.to(device)
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), "cpu")
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
raw_model = model.module if ddp else model


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(eval_iters)
    for k in range(eval_iters):
        X, Y = get_batch(-1, k)
        with ctx:
            logits, loss = model(X, Y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


losses = []
for iter_num in range(max_iters):
    if iter_num == 0 and master_process:
        print(f"step {iter_num}: val loss {estimate_loss():.4f}")     # on rank 0 alone, through the DDP wrapper
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        X, Y = get_batch(iter_num, micro_step)
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        loss.backward()
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item() * gradient_accumulation_steps)

if master_process:
    np.savez(out_path, **{name: t.numpy() for name, t in raw_model.state_dict().items()})
    print(f"iter {iter_num}: loss {losses[-1]:.4f}")
if ddp:
    destroy_process_group()
