# %% [markdown]
# # 22 · Many processes, one model: data parallel, ZeRO and ring attention
#
# Read after 04 (flash attention) and 06 (the GPT). One process is one CPU core's worth of work (or one GPU's). To
# use more, start several copies of the same script, the *ranks*, and let them talk: MPI starts them and moves
# their bytes. This lesson runs on as many ranks as you start:
#
#     mpiexec -n 2 python lessons/22_many_processes.py --quick
#     python -m tinyattn.distributed.run --nproc-per-node 2 lessons/22_many_processes.py   # the same, as torchrun
#
# Alone (`python lessons/22_many_processes.py`, or as a notebook) it is a world of 1: everything runs and checks,
# and the cells that time messages say that there is nobody to talk to. Rank 0 prints; every rank asserts.
#
# Three ways to split the work, from `tinyattn.distributed` (torch.distributed's names, on MPI):
# - **data parallel** (DDP): every rank holds the whole model and a share of the batch; gradients are averaged;
# - **ZeRO-1**: as DDP, but each rank keeps the optimizer state of a share of the parameters only;
# - **context parallel** (ring attention): every rank holds a share of the *sequence*, and flash attention's
#   key/value tiles travel round a ring of ranks, merged with lesson 04's online softmax.
# Between them, we write the ring all-reduce by hand and measure what a message costs.

# %%
import os
import sys
import time

import numpy as np

import tinyattn as ta
import tinyattn.distributed as dist
import tinyattn.functional as F
from tinyattn import viz
from tinyattn.distributed.collectives import start_all_reduce_unchecked
from tinyattn.distributed.optim import ZeroRedundancyOptimizer
from tinyattn.distributed.ring_attention import sequence_indices, sequence_pieces
from tinyattn.lesson import options, plot_path, report
from tinyattn.models import GPT, GPTConfig
from tinyattn.nn.parallel import DistributedDataParallel as DDP

if not dist.is_initialized():
    dist.init_process_group(backend="mpi")          # under mpiexec a world of N; alone, a world of 1
rank, world = dist.get_rank(), dist.get_world_size()
if rank != 0:
    sys.stdout = open(os.devnull, "w")              # rank 0 speaks for all
args = options(__doc__)
if world > 1:
    ta.set_num_threads(1)                           # one core per rank (the launcher sets this for BLAS too)
rng = np.random.default_rng(args.seed)              # the same draws on every rank
print(f"a world of {world} rank{'s' if world > 1 else ''}" +
      ("" if world > 1 else "; for more: mpiexec -n 2 python lessons/22_many_processes.py"))


def on_every_rank(value, op=dist.ReduceOp.MAX):
    """A number reduced over the ranks (the largest error anywhere, say)."""
    t = ta.tensor([float(value)], dtype=ta.float64)
    dist.all_reduce(t, op=op)
    return t.item()


def exchange(out, like):
    """Send out to the next rank of the ring while receiving an array like `like` from the previous one."""
    received = ta.tensor(np.empty_like(like))
    works = [dist.isend(ta.tensor(out), dst=(rank + 1) % world), dist.irecv(received, src=(rank - 1) % world)]
    for work in works:
        work.wait()
    return received.numpy()


# %% [markdown]
# ## Data parallel: the same training as one process on the whole batch
# Each rank runs the model on its share of the batch; during backward, DistributedDataParallel averages each
# gradient over the ranks (in buckets, while backward still runs). The mean loss over the whole batch is the mean of
# the ranks' mean losses when the shares are equal, so the averaged gradient *is* the whole batch's gradient, and
# every rank takes the same optimizer step. In float64 the two agree to rounding, step after step. (With SGD: AdamW
# divides each step by the gradient's running size, which can enlarge the rounding differences of a near-zero
# gradient; tests/test_distributed.py holds DDP with AdamW to 1e-10 relative.)

# %%
config = GPTConfig(vocab_size=32, block_size=16, n_layer=2, num_heads=2, d_model=16 if args.quick else 32)
per_rank, steps = 2, 3 if args.quick else 5
ta.manual_seed(args.seed + 1 + rank)                 # a different start on each rank: DDP broadcasts rank 0's
model = GPT(config).double()
ddp = DDP(model)
whole = GPT(config).double()
whole.load_state_dict(model.state_dict())           # one process, the whole batch, from the same start
optimizers = [ta.optim.SGD(net.parameters(), lr=0.1, momentum=0.9) for net in (ddp, whole)]
share = slice(rank * per_rank, (rank + 1) * per_rank)
for step in range(steps):
    tokens = ta.tensor(rng.integers(0, config.vocab_size, (per_rank * world, config.block_size + 1)))
    x, y = tokens[:, :-1], tokens[:, 1:]
    for net, optimizer, rows in ((ddp, optimizers[0], share), (whole, optimizers[1], slice(None))):
        optimizer.zero_grad()
        _, loss = net(x[rows], y[rows])
        loss.backward()
        optimizer.step()
ddp_max_param_diff = on_every_rank(max(np.abs(p.numpy() - q.numpy()).max()
                                       for p, q in zip(model.parameters(), whole.parameters())))
print(f"{steps} SGD steps, {world} rank(s) x {per_rank} sequences against one process on {per_rank * world}: "
      f"largest parameter difference {ddp_max_param_diff:.1e}")
assert ddp_max_param_diff < 1e-12

# %% [markdown]
# ## The ring all-reduce, by hand
# All-reduce: every rank ends with the sum of every rank's buffer. The ring does it without any rank receiving
# everything: cut the buffer into N chunks. **Reduce-scatter**, N - 1 steps: at step s rank r sends chunk r - s to
# rank r + 1 and adds what it receives (chunk r - 1 - s) into its own copy; after N - 1 steps rank r holds the whole
# sum of chunk r + 1. **All-gather**, N - 1 more steps: pass the finished chunks on round the ring, each rank
# overwriting its copy. Each rank sends 2(N - 1) chunks of n/N: 2(N - 1)/N of the buffer, however many ranks there
# are. That is why the ring is the all-reduce of choice for large buffers.

# %%
def ring_schedule(world):
    """The chunk each rank sends at each step: reduce-scatter's steps, then all-gather's (rank r sends to r + 1)."""
    scatter = [[(r - s) % world for r in range(world)] for s in range(world - 1)]
    gather = [[(r + 1 - s) % world for r in range(world)] for s in range(world - 1)]
    return scatter, gather


def ring_all_reduce(buffer):
    """The sum of every rank's buffer (a 1-D array), on send/recv; and the bytes this rank sent."""
    chunks = np.array_split(buffer.copy(), world)
    scatter, gather = ring_schedule(world)
    sent = 0
    for step, sends in enumerate(scatter + gather):
        out, arriving = sends[rank], sends[(rank - 1) % world]
        received = exchange(chunks[out], chunks[arriving])
        sent += chunks[out].nbytes
        chunks[arriving] = chunks[arriving] + received if step < len(scatter) else received
    return np.concatenate(chunks), sent


n = world * (1_000 if args.quick else 250_000)
buffer = rng.standard_normal((world, n))[rank]       # a different buffer on each rank
by_hand, sent = ring_all_reduce(buffer)
with_mpi = ta.tensor(buffer)
dist.all_reduce(with_mpi)
ring_allreduce_max_error = on_every_rank(np.abs(by_hand - with_mpi.numpy()).max())
print(f"ring all-reduce by hand vs MPI's, {buffer.nbytes / 1e6:.1f} MB: largest difference "
      f"{ring_allreduce_max_error:.1e}; rank {rank} sent {sent / buffer.nbytes:.3f} of the buffer "
      f"(2(N-1)/N = {2 * (world - 1) / world:.3f})")
assert ring_allreduce_max_error < 1e-12 and sent == 2 * (world - 1) * buffer.nbytes // world

# %% [markdown]
# The ring's steps for 3 ranks: each square is one rank's copy of one chunk, its number how many ranks' values it
# holds so far; the framed square is the one the rank sends to its right-hand neighbour at that step.

# %%
def draw_ring(world=3):
    scatter, gather = ring_schedule(world)
    holds = np.ones((world, world), dtype=int)       # holds[r, c]: ranks' values in rank r's chunk c
    fig, axes = viz.plt.subplots(1, 2 * (world - 1), figsize=(2.3 * 2 * (world - 1), 2.6))
    for i, (ax, sends) in enumerate(zip(axes, scatter + gather)):
        before = holds.copy()
        ax.imshow(before, cmap="Blues", vmin=0, vmax=world + 1)
        for r in range(world):
            for c in range(world):
                ax.text(c, r, str(before[r, c]), ha="center", va="center")
            ax.add_patch(viz.plt.Rectangle((sends[r] - 0.5, r - 0.5), 1, 1, fill=False, lw=2.5, color="crimson"))
            arriving, sender = sends[(r - 1) % world], (r - 1) % world
            holds[r, arriving] = before[r, arriving] + before[sender, arriving] if i < world - 1 else \
                before[sender, arriving]
        ax.set_title(("reduce-scatter" if i < world - 1 else "all-gather") + f", step {i % (world - 1) + 1}",
                     fontsize=9)
        ax.set_xticks(range(world), [f"chunk {c}" for c in range(world)], fontsize=7)
        ax.set_yticks(range(world), [f"rank {r}" for r in range(world)], fontsize=7)
    assert (holds == world).all()                    # every rank ends with every chunk summed over every rank
    fig.tight_layout()
    return fig


if rank == 0:
    viz.save(draw_ring(), plot_path(args, "22_ring_allreduce_steps.png"))

# %% [markdown]
# ## What a message costs: α and β
# Sending n bytes costs about α + n/β: α the latency of one exchange, β the bandwidth. A ring all-reduce over N
# ranks takes 2(N - 1) steps of n/N bytes: about 2(N - 1)α + 2(N - 1)/N · n/β. We time all-reduces of growing size
# and fit that line (by relative error, so that the small sizes count as much as the large). MPI's all-reduce may
# pick another algorithm than the ring for small buffers; the fit reads it as the ring's. Here the timing is of
# MPI's call alone: `dist.all_reduce` first compares the ranks' sizes with one more 16-byte all-reduce (one more α),
# which DDP's buckets skip. Alone, nobody is there to talk to: the cell times a message to this rank itself, which
# MPI copies, instead.

# %%
def median_seconds(function, repeats):
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return on_every_rank(np.median(times))           # the slowest rank's: a collective ends when all have it


def one_message(x):
    if world > 1:
        return lambda: start_all_reduce_unchecked(x, dist.ReduceOp.SUM, group).wait()
    return lambda: exchange(x.array, x.array)


group = dist.new_group()                             # the whole world, as a group object for the unchecked call
sizes = 2 ** np.arange(4, 14 if args.quick else 21)  # float64 elements: 128 B to 8 MiB
seconds = np.array([median_seconds(one_message(ta.zeros(int(s), dtype=ta.float64)), 5 if args.quick else 30)
                    for s in sizes])
nbytes = sizes * 8.0
design = np.stack([np.ones_like(nbytes), nbytes], axis=1) / seconds[:, None]
intercept, slope = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)[0]
steps_factor, bytes_factor = (2 * (world - 1), 2 * (world - 1) / world) if world > 1 else (1, 1.0)
allreduce_alpha_us = intercept / steps_factor * 1e6
allreduce_beta_gbps = bytes_factor / slope / 1e9
timed = f"all-reduce on {world} ranks" if world > 1 else "a message to itself"
print(f"fitted on {len(sizes)} sizes: alpha = {allreduce_alpha_us:.1f} us per exchange, beta = "
      f"{allreduce_beta_gbps:.2f} GB/s ({timed}; timings depend on what else runs on the machine)")
print(f"at {intercept / slope / 1e3:.0f} kB the fitted line's two terms are equal: smaller buffers are latency-bound, "
      "so gradients go in buckets of megabytes")
if intercept <= 0 or slope <= 0:
    print("warning: the fit is not a line of positive latency and bandwidth: the timings were too noisy (a busy "
          "machine?); run the lesson again")


def draw_alpha_beta():
    fig, ax = viz.plt.subplots(figsize=(5, 3.2))
    ax.loglog(nbytes, seconds * 1e6, "o", label="measured (median)")
    line = "2(N-1) alpha + 2(N-1)/N n/beta" if world > 1 else "alpha + n/beta"
    ax.loglog(nbytes, (intercept + slope * nbytes) * 1e6, "-", label=f"fit {line}: alpha {allreduce_alpha_us:.1f} us, "
              f"beta {allreduce_beta_gbps:.1f} GB/s")
    ax.set_xlabel("bytes")
    ax.set_ylabel("microseconds")
    ax.set_title(timed, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


if rank == 0:
    viz.save(draw_alpha_beta(), plot_path(args, "22_allreduce_alpha_beta.png"))

# %% [markdown]
# ## Buckets, and how much of the all-reduce hides behind backward
# DDP does not wait for the whole backward: gradients are copied into buckets as backward produces them (the last
# layers first), and a full bucket's all-reduce starts at once, while backward goes on with the earlier layers. Small
# buckets start early but pay α each; one huge bucket pays α once but starts only at the end. We time a training
# step (forward and backward, the slowest rank's) with DDP averaging, and the same step under `no_sync()` (no
# communication at all): the difference is the communication that did not hide. Against the time the same buckets
# take alone, that gives the fraction hidden.
#
# On this machine, honestly, little may hide. MPICH moves a started all-reduce only inside MPI calls (DDP calls
# `Test()` between layers, docs/distributed.md), and on one machine MPI's "network" is a copy through shared memory
# that the CPU itself does: with as many ranks as cores there is no idle core to do it while backward computes.
# Across machines, a network card moves the bytes and the overlap pays.

# %%
big = GPTConfig(vocab_size=64, block_size=32, n_layer=1 if args.quick else 4, num_heads=4,
                d_model=32 if args.quick else 128)
tokens = ta.tensor(rng.integers(0, big.vocab_size, (2, big.block_size + 1)))
timings = {}
for bucket_mb in (0.05, 0.25, 1.0, 25.0):
    ta.manual_seed(args.seed)
    net = GPT(big)                                   # a model of its own for each wrapper (each hooks its parameters)
    wrapped = DDP(net, bucket_cap_mb=bucket_mb)

    def train_step():
        _, loss = wrapped(tokens[:, :-1], tokens[:, 1:])
        loss.backward()

    def local_step():
        with wrapped.no_sync():
            train_step()
    repeats = 2 if args.quick else 12
    step_s, local_s = median_seconds(train_step, repeats), median_seconds(local_step, repeats)
    buckets = [ta.tensor(b.flat) for b in wrapped._buckets]

    def buckets_alone():
        for work in [start_all_reduce_unchecked(b, dist.ReduceOp.AVG, group) for b in buckets]:
            work.wait()
    alone_s = median_seconds(buckets_alone, repeats)
    hidden = min(1.0, max(0.0, 1 - (step_s - local_s) / alone_s)) if world > 1 else 0.0
    timings[bucket_mb] = (len(buckets), step_s, local_s, alone_s, hidden)
n_params = sum(p.numel() for p in net.parameters())
print(f"a GPT of {n_params:,} float32 parameters ({4 * n_params / 1e6:.1f} MB), forward and backward on {world} "
      "rank(s) (the machine may be busy with other work):")
print("bucket_cap_mb  buckets  step ms  no_sync ms  all-reduce alone ms  hidden")
for bucket_mb, (count, step_s, local_s, alone_s, hidden) in timings.items():
    print(f"{bucket_mb:13g}  {count:7d}  {step_s * 1e3:7.1f}  {local_s * 1e3:10.1f}  {alone_s * 1e3:19.2f}  "
          f"{hidden:6.0%}")
extra_ms = {b: (t[1] - t[2]) * 1e3 for b, t in timings.items()}
print(f"DDP adds {min(extra_ms.values()):.1f} to {max(extra_ms.values()):.1f} ms to a step over no_sync(); where that "
      "is more than the all-reduce alone, the copies into buckets, the hooks and waiting for the slower rank cost "
      "more than the bytes")
fastest = min(timings, key=lambda b: timings[b][1])
overlap_fraction = timings[fastest][4]
print(f"fastest step with buckets of {fastest:g} MB; the fraction of its all-reduce hidden behind backward: "
      f"{overlap_fraction:.0%}" + ("" if world > 1 else " (alone there is nothing to hide)"))

# %% [markdown]
# ## ZeRO-1: each rank keeps a share of the optimizer state
# AdamW keeps two buffers per parameter (m and v), twice the model's size. Under DDP every rank holds all of them,
# and every rank computes the same update. ZeroRedundancyOptimizer deals the parameters out: each rank keeps the
# state of its share, steps it, and broadcasts the new values. The steps are the plain optimizer's, bit for bit.

# %%
ta.manual_seed(args.seed)
sharded_model, plain_model = GPT(config).double(), GPT(config).double()
plain_model.load_state_dict(sharded_model.state_dict())
sharded = ZeroRedundancyOptimizer(sharded_model.parameters(), optimizer_class=ta.optim.AdamW, lr=1e-2)
plain = ta.optim.AdamW(plain_model.parameters(), lr=1e-2)
for step in range(3):
    tokens = ta.tensor(rng.integers(0, config.vocab_size, (2, config.block_size + 1)))
    for net, optimizer in ((sharded_model, sharded), (plain_model, plain)):
        optimizer.zero_grad()
        net(tokens[:, :-1], tokens[:, 1:])[1].backward()            # the same gradients on every rank
        optimizer.step()
assert all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(sharded_model.parameters(), plain_model.parameters()))
plain_bytes = sum(v.nbytes for s in plain.state.values() for v in s.values() if hasattr(v, "nbytes"))
zero_state_bytes_ratio = on_every_rank(sharded.local_state_bytes()) / plain_bytes
print(f"AdamW's state: {plain_bytes / 1e3:.0f} kB per rank plain; with ZeRO-1 at most {zero_state_bytes_ratio:.2f} "
      f"of it on any rank (1/N = {1 / world:.2f}; parameters are dealt out whole, so the shares are not exactly equal)")
assert zero_state_bytes_ratio <= 1 and (world == 1 or zero_state_bytes_ratio < 1)

# %% [markdown]
# ## Ring attention: one attention spread over the ranks
# Lesson 04 walked over key/value blocks, keeping per query row the running maximum m, the running sum l of
# exp(S - m) and the running output acc, rescaling both by exp(m_old - m_new) when the maximum grows. Nothing there
# needs the blocks to be in one process. Give rank r the r-th chunk of the sequence (its queries, keys and values);
# at step t it holds key/value block r - t, merges it into its rows, and passes it on to rank r + 1 while receiving
# the next from rank r - 1. After N - 1 passes every rank has seen every block: O = acc / l, L = m + log l.
#
# Backward is flash attention's: with D = rowsum(dO * O), each block's P = exp(S - L) is recomputed, dQ stays at
# home, and dK, dV travel round the ring with their block; one last pass brings each block's gradient home.
# With a causal mask, rank r's queries see chunks 0..r only: fully masked blocks are skipped, but then the last rank
# works N times as long as the first. The **zigzag** layout cuts the sequence into 2N chunks and gives rank r chunks
# r and 2N - 1 - r, one early and one late: every rank gets the same work.
#
# Below, both loops as derived above, on this lesson's `exchange` and without a mask (the library's reference twin,
# `ReferenceRingAttention`, is these loops with the causal mask and the layouts); then the library's
# `dist.ring_attention`; all against flash attention on the whole sequence, forward and backward, in float64.

# %%
def ring_forward_by_hand(q, k, v, scale):
    """One rank's output rows and their L, no mask: the blocks come round the ring and merge with the online
    softmax."""
    m = np.full(q.shape[:-1] + (1,), -np.inf)
    l = np.zeros_like(m)
    acc = np.zeros(q.shape[:-1] + v.shape[-1:])
    for step in range(world):
        s = scale * q @ np.swapaxes(k, -1, -2)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        p = np.exp(s - m_new)
        alpha = np.exp(m - m_new)
        l, acc, m = alpha * l + p.sum(axis=-1, keepdims=True), alpha * acc + p @ v, m_new
        if step < world - 1:
            k, v = exchange(k, k), exchange(v, v)
    return acc / l, m + np.log(l)


def ring_backward_by_hand(q, k, v, out, L, grad, scale):
    """dq for this rank's rows; dk and dv travel with their block and are home after the last pass."""
    D = (grad * out).sum(axis=-1, keepdims=True)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for step in range(world):
        p = np.exp(scale * q @ np.swapaxes(k, -1, -2) - L)          # the block's probabilities, exactly
        dv = dv + np.swapaxes(p, -1, -2) @ grad
        ds = p * (grad @ np.swapaxes(v, -1, -2) - D)
        dq = dq + scale * ds @ k
        dk = dk + scale * np.swapaxes(ds, -1, -2) @ q
        if step < world - 1:
            k, v = exchange(k, k), exchange(v, v)
        dk, dv = exchange(dk, dk), exchange(dv, dv)
    return dq, dk, dv


heads, d = 2, 8
seq = 2 * world * (4 if args.quick else 32)
q_all, k_all, v_all = (ta.tensor(rng.standard_normal((1, heads, seq, d))) for _ in range(3))
weights = ta.tensor(rng.standard_normal((1, heads, seq, d)))     # loss = sum(weights * out): every row counts


def gathered(local, layout):
    """The whole sequence from every rank's part, each row at its global position."""
    parts = [ta.zeros(*local.shape, dtype=local.dtype) for _ in range(world)]
    dist.all_gather(parts, local.detach())
    whole = np.zeros(local.shape[:-2] + (seq, local.shape[-1]))
    for r, part in enumerate(parts):
        whole[..., sequence_indices(seq, r, world, layout), :] = part.numpy()
    return whole


mine = sequence_indices(seq, rank, world)
q_mine, k_mine, v_mine = (t.numpy()[..., mine, :] for t in (q_all, k_all, v_all))
out_by_hand, L_by_hand = ring_forward_by_hand(q_mine, k_mine, v_mine, d ** -0.5)
grads_by_hand = ring_backward_by_hand(q_mine, k_mine, v_mine, out_by_hand, L_by_hand, weights.numpy()[..., mine, :],
                                      d ** -0.5)
leaves = [t.detach().requires_grad_() for t in (q_all, k_all, v_all)]
(F.flash_attention(*leaves) * weights).sum().backward()
errors = [np.abs(out_by_hand - F.flash_attention(q_all, k_all, v_all).numpy()[..., mine, :]).max()] + \
    [np.abs(g - t.grad.numpy()[..., mine, :]).max() for g, t in zip(grads_by_hand, leaves)]
for is_causal in (False, True):
    leaves = [t.detach().requires_grad_() for t in (q_all, k_all, v_all)]
    want = F.flash_attention(*leaves, is_causal=is_causal)
    (want * weights).sum().backward()
    for layout in ("contiguous", "zigzag"):
        parts = [dist.shard_sequence(t, layout).detach().requires_grad_() for t in (q_all, k_all, v_all)]
        out = dist.ring_attention(*parts, is_causal=is_causal, layout=layout)
        (out * dist.shard_sequence(weights, layout)).sum().backward()
        for got, wanted in zip([out] + [t.grad for t in parts], [want] + [t.grad for t in leaves]):
            errors.append(np.abs(gathered(got, layout) - wanted.detach().numpy()).max())
ring_attention_max_error = on_every_rank(max(errors))
print(f"ring attention on {world} rank(s) vs flash attention on the whole sequence, output and dq, dk, dv (by hand; "
      f"the library's, causal and not, both layouts): largest difference {ring_attention_max_error:.1e}")
assert ring_attention_max_error < 1e-12

# %% [markdown]
# What each rank holds: its 1/N of q, k, v and the output, and of the scores it computes, S/N rows of the S x S
# matrix. It never holds even those at once: one block of (S/N) x (S/N) scores at a time (1/N² of the matrix that
# plain attention forms), and a library could walk that block with flash attention's tiles too.

# %%
n_local = seq // world
score_share = n_local * seq / seq ** 2
largest_block = max((b - a) for a, b in sequence_pieces(seq, rank, world)) ** 2 / seq ** 2
print(f"S = {seq}: each rank computes {score_share:.3f} of the S x S scores (1/N = {1 / world:.3f}) and holds at "
      f"most {largest_block:.3f} of them at once (1/N^2 = {1 / world ** 2:.3f})")
assert score_share == 1 / world and largest_block == 1 / world ** 2

# %% [markdown]
# ## What the zigzag and the overlap buy, measured
# Causal ring attention, forward and backward, timed on the slowest rank (the ring waits for it): the contiguous
# layout against the zigzag, and the reference twin (pass the block on, then compute) against the library's fast
# path, which starts the next pass before computing on the block in hand. MPICH moves a large message only inside MPI
# calls (unless its progress thread is on, `MPIR_CVAR_ASYNC_PROGRESS=1`), so the transfer started early may not move
# until the wait; and with as many ranks as cores, the copy through shared memory takes a core either way.

# %%
long = 2 * world * (8 if args.quick else 512)
q_long, k_long, v_long = (ta.tensor(rng.standard_normal((1, 4, long, 64)).astype(np.float32)) for _ in range(3))


def causal_ring(layout, reference):
    parts = [dist.shard_sequence(t, layout).requires_grad_() for t in (q_long, k_long, v_long)]

    def run():
        with ta.reference(reference):
            dist.ring_attention(*parts, is_causal=True, layout=layout).sum().backward()
    return run


ring_seconds = {(layout, reference): median_seconds(causal_ring(layout, reference), 2 if args.quick else 5)
                for layout in ("contiguous", "zigzag") for reference in (True, False)}
for (layout, reference), s in ring_seconds.items():
    print(f"  {layout:10} {'reference (exchange, then compute)' if reference else 'fast (next pass started first)':35}"
          f" {s * 1e3:8.1f} ms")
zigzag_speedup = ring_seconds["contiguous", False] / ring_seconds["zigzag", False]
print(f"S = {long}, 4 heads of 64, float32, {world} rank(s): zigzag {zigzag_speedup:.2f}x faster than contiguous "
      f"(the work predicts {4 * world / (2 * world + 1):.2f}x: the last contiguous rank computes N blocks of (S/N)^2 "
      f"scores, a zigzag rank 2N + 1 of (S/2N)^2); the fast path "
      f"{ring_seconds['zigzag', True] / ring_seconds['zigzag', False]:.2f}x the reference's speed, MPICH's progress "
      f"thread {'on' if os.environ.get('MPIR_CVAR_ASYNC_PROGRESS') == '1' else 'off'} (the machine may be busy with "
      "other work)")

# %% [markdown]
# Does MPI move a started message while the rank computes? Start passing one key/value block of the timing above,
# compute for a while without calling MPI (a matmul), then wait. The ranks end their compute at different moments,
# so the wait is counted from the moment the last of them ended it (one machine: one clock): if the bytes moved
# during the compute, nothing is left to wait for then; if not, the whole pass is.

# %%
block = dist.shard_sequence(k_long, "zigzag").numpy()


def pass_alone():
    exchange(block, block)


def pass_behind_compute(waits):
    received = ta.tensor(np.empty_like(block))
    works = [dist.isend(ta.tensor(block), dst=(rank + 1) % world), dist.irecv(received, src=(rank - 1) % world)]
    busy = q_long.numpy()[0, 0]
    for _ in range(20):
        busy @ busy.T                                   # compute, no MPI call
    ended = time.perf_counter()
    for work in works:
        work.wait()
    done = time.perf_counter()
    waits.append(done - on_every_rank(ended))           # after the slowest rank's compute (an MPI call, after the wait)


waits = []
alone_ms = median_seconds(pass_alone, 3 if args.quick else 10) * 1e3
median_seconds(lambda: pass_behind_compute(waits), 3 if args.quick else 10)
behind_ms = on_every_rank(np.median(waits)) * 1e3
print(f"a {block.nbytes / 1e6:.2f} MB block: passed alone {alone_ms:.2f} ms; started before the compute, still "
      f"{behind_ms:.2f} ms to go when the last rank's compute ended" +
      (f": {min(1.0, max(0.0, 1 - behind_ms / alone_ms)):.0%} of the pass moved during the compute" if world > 1 else
       " (a world of 1 passes to itself)"))

# %%
report(ddp_max_param_diff=ddp_max_param_diff, ring_allreduce_max_error=ring_allreduce_max_error,
       ring_attention_max_error=ring_attention_max_error, zero_state_bytes_ratio=zero_state_bytes_ratio,
       allreduce_alpha_us=allreduce_alpha_us, allreduce_beta_gbps=allreduce_beta_gbps,
       overlap_fraction=overlap_fraction, world_size=world, zigzag_speedup=zigzag_speedup)
dist.destroy_process_group()
