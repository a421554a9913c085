"""Benchmarks: `python -m tinyattn.bench {attention,train-step,matmul,ddp} ...`; the last output line is JSON.

Every measurement runs in its own process (peak resident memory, ru_maxrss, only ever grows) and reports medians.
Memory comes two ways: extra_mib, the growth of ru_maxrss over the whole run, which depends on how much freed memory
each allocator keeps; and on the CPU traced_peak_mib, one step's peak as each framework accounts for its own arrays,
counted the same way for both (Workload.traced_peak_mib).
`--framework torch` runs the same workload in PyTorch as the side-by-side peer; torch is imported only then, so run
that from an environment that has it (it is never a dependency of tinyattn).
"""
import argparse
import contextlib
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class Workload:
    """Random inputs and one timed step, for tinyattn (CPU or CUDA) or for the PyTorch peer."""

    def __init__(self, framework, device):
        self.framework, self.device = framework, device
        if framework == "torch":
            import torch
            self.torch = torch
            torch.manual_seed(0)

    def sync(self):
        if self.device == "cuda":
            if self.framework == "torch":
                self.torch.cuda.synchronize()
            else:
                import cupy
                cupy.cuda.Device().synchronize()

    def pool_peak_mib(self, step):
        """GPU memory the framework's caching allocator holds after one step run from an emptied pool: PyTorch's
        max_memory_reserved, CuPy's memory-pool total (the pool only grows, so it ends at the step's peak)."""
        if self.framework == "torch":
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()
            step()
            return self.torch.cuda.max_memory_reserved() / 2 ** 20
        import cupy
        pool = cupy.get_default_memory_pool()
        pool.free_all_blocks()
        step()
        cupy.cuda.Device().synchronize()
        return pool.total_bytes() / 2 ** 20

    def traced_peak_mib(self, step):
        """The peak of what one step allocates on the CPU, above what was allocated before it, as each framework's
        own accounting sees its arrays: for tinyattn, tracemalloc (NumPy reports each array's memory to it), for
        PyTorch, its profiler's memory events (its CPU allocator reports each allocation and free). Both leave out
        the freeing of memory allocated before the step (the old gradients, say): neither has seen it allocated.
        Whatever the allocator keeps around for reuse, which ru_maxrss counts, counts in neither. One extra, untimed
        run."""
        if self.framework == "torch":
            cpu = self.torch.profiler.DeviceType.CPU
            with self.torch.profiler.profile(profile_memory=True) as profile:
                step()
            # kineto_results holds every allocation and free in order; events() folds most of them into operators.
            changes = sorted((event.start_ns(), event.nbytes()) for event in profile.profiler.kineto_results.events()
                             if event.name() == "[memory]" and event.device_type() == cpu)
            return max(itertools.accumulate((size for _, size in changes), initial=0)) / 2 ** 20
        tracemalloc.start()
        try:
            step()
            return tracemalloc.get_traced_memory()[1] / 2 ** 20
        finally:
            tracemalloc.stop()

    def randn(self, *shape, requires_grad=False):
        if self.framework == "torch":
            return self.torch.randn(*shape, device=self.device, requires_grad=requires_grad)
        import tinyattn as ta
        return ta.randn(*shape, device=self.device, requires_grad=requires_grad)


def attention_step(work, args):
    shape_q = (args.batch, args.heads, args.n, args.dim)
    shape_kv = (args.batch, args.kv_heads or args.heads, args.n, args.dim)
    q, k, v = work.randn(*shape_q, requires_grad=True), work.randn(*shape_kv, requires_grad=True), \
        work.randn(*shape_kv, requires_grad=True)
    gqa = (args.kv_heads or args.heads) != args.heads
    info = {"approx_flops": 4 * args.batch * args.heads * args.n * args.n * args.dim * (0.5 if args.causal else 1.0)
            * 3.5}
    if work.framework == "torch":
        sdpa = work.torch.nn.functional.scaled_dot_product_attention

        def step():
            sdpa(q, k, v, is_causal=args.causal, enable_gqa=gqa).sum().backward()
    else:
        import tinyattn.functional as F
        from tinyattn import cpu
        plain = args.impl in ("sdpa", "reference")                    # scaled_dot_product_attention, not flash
        attend = F.scaled_dot_product_attention if plain else F.flash_attention
        extra = {} if plain else {"block_size": args.block_size, "fused": None if args.impl == "flash" else False}
        if not plain and args.device == "cpu":     # the block it runs with (--dim is q's and v's head size)
            info["block_size"] = args.block_size or cpu.attention_block(args.dim, q.array)

        def step():
            with F.reference() if args.impl == "reference" else contextlib.nullcontext():
                attend(q, k, v, is_causal=args.causal, enable_gqa=gqa, **extra).sum().backward()
    return step, info


def train_step(work, args, wrap=None):
    """One AdamW step of a pre-norm GPT (LayerNorm, GELU MLP of 4D, causal attention, untied head); wrap(model), where
    given, is what the step calls (DistributedDataParallel)."""
    wrap = wrap or (lambda model: model)
    if work.framework == "torch":
        model, optimizer, ids, params = _torch_gpt(work.torch, args, work.device)
        model = wrap(model)

        def step():
            logits = model(ids[:, :-1])
            loss = work.torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    else:
        import tinyattn as ta
        from tinyattn.models import GPT, GPTConfig
        config = GPTConfig(vocab_size=args.vocab, block_size=args.seq, n_layer=args.layers, num_heads=args.heads,
                           d_model=args.d_model, impl=args.impl)
        inner = GPT(config).to(args.device)
        optimizer = ta.optim.AdamW(inner.parameters(), lr=3e-4)
        model = wrap(inner)
        ids = ta.randint(0, args.vocab, (args.batch, args.seq + 1), device=args.device)
        params = inner.num_parameters()

        def step():
            _, loss = model(ids[:, :-1], ids[:, 1:])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        flops = inner.flops_per_token(args.seq) * args.batch * args.seq
        return step, {"params": params, "approx_flops": flops}
    return step, {"params": params}


def _torch_gpt(torch, args, device):
    """The same architecture in PyTorch, for the side-by-side peer."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(args.d_model), nn.LayerNorm(args.d_model)
            self.qkv, self.proj = nn.Linear(args.d_model, 3 * args.d_model), nn.Linear(args.d_model, args.d_model)
            self.mlp = nn.Sequential(nn.Linear(args.d_model, 4 * args.d_model), nn.GELU(),
                                     nn.Linear(4 * args.d_model, args.d_model))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, args.heads, d // args.heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(a)
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(args.vocab, args.d_model), nn.Embedding(args.seq, args.d_model)
            self.blocks = nn.Sequential(*[Block() for _ in range(args.layers)])
            self.ln_f, self.head = nn.LayerNorm(args.d_model), nn.Linear(args.d_model, args.vocab, bias=False)

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            return self.head(self.ln_f(self.blocks(x)))

    model = GPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=device)
    return model, optimizer, ids, sum(p.numel() for p in model.parameters())


def matmul_step(work, args):
    """A large float32 matmul: the machine's practical FLOP rate, the yardstick for everything else."""
    a, b = work.randn(args.n, args.n), work.randn(args.n, args.n)
    if work.framework == "torch":
        step = lambda: a @ b
    else:
        step = lambda: a.array @ b.array
    return step, {"approx_flops": 2 * args.n ** 3}


def ddp_rank_step(work, args):
    """One rank of `ddp --as-rank`: the train step of its share of the batch, its model in DistributedDataParallel
    (tinyattn's on MPI, or PyTorch's on gloo, started by torchrun), and, for tinyattn, how long all-reducing every
    gradient takes when nothing else runs (the communication a step has to hide)."""
    if work.framework == "torch":
        torch = work.torch
        torch.distributed.init_process_group("gloo")
        step, info = train_step(work, args, lambda model: torch.nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=args.bucket_cap_mb))
        return step, {**info, "rank": torch.distributed.get_rank()}
    import tinyattn as ta
    from tinyattn import distributed as dist
    dist.init_process_group("mpi")
    wrapped = []
    step, info = train_step(work, args, lambda model: wrapped.append(
        ta.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)) or wrapped[0])
    buckets = [ta.Tensor(bucket.flat.copy()) for bucket in wrapped[0]._buckets]
    times = []
    for _ in range(args.warmup + args.reps):
        dist.barrier()
        start = time.perf_counter()
        for works in [dist.all_reduce(b, op=dist.ReduceOp.AVG, async_op=True) for b in buckets]:
            works.wait()
        times.append(time.perf_counter() - start)
    waits = []

    def step_noting_the_wait():
        step()
        waits.append(wrapped[0].last_wait_s)
    return step_noting_the_wait, {"rank": dist.get_rank(), "buckets": len(buckets),
                                  "allreduce_alone_s": statistics.median(times[args.warmup:]),
                                  "waits": waits, **info}


def ddp_compare(args):
    """`ddp`: the step time of --nproc ranks, one thread each, against one process (one thread) on one rank's share
    of the batch: what data parallelism adds to a step. On a machine others share, N processes slow each other down
    without any communication: --nproc independent processes of that one-process step, run at once, show that part
    (`independent_median_s`), and `ddp_over_independent` what DDP adds beyond it. Each runs in processes of its own;
    tinyattn's ranks start through tinyattn.distributed.run (MPI), PyTorch's through torchrun (gloo)."""
    flags = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in
             ("vocab", "d_model", "layers", "heads", "seq", "batch", "impl", "warmup", "framework")] + \
        [f"--steps={args.reps}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TINYATTN_NUM_THREADS": "1"}
    if args.mpi_async_progress:
        env["MPIR_CVAR_ASYNC_PROGRESS"] = "1"
    bench = ["-m", "tinyattn.tools.bench"]
    launcher = ["-m", "torch.distributed.run", "--standalone"] if args.framework == "torch" else \
        ["-m", "tinyattn.distributed.run"]
    one = [sys.executable, *bench, "train-step", *flags]
    runs = {"one_process": [one], "independent": [one] * args.nproc,
            "ranks": [[sys.executable, *launcher, f"--nproc-per-node={args.nproc}", *bench, "ddp", "--as-rank",
                       f"--bucket-cap-mb={args.bucket_cap_mb}", *flags]]}
    found = {}
    for name, commands in runs.items():        # the commands of a run start together
        started = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                   for command in commands]
        lines = []
        for command, process in zip(commands, started):
            out, err = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"bench ddp: {' '.join(command)} failed:\n{err[-3000:]}")
            lines += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        found[name] = sorted(lines, key=lambda line: line.get("rank", 0))
    one, ranks = found["one_process"][0], found["ranks"][0]
    independent = max(line["median_s"] for line in found["independent"])   # a step waits for the slowest rank
    result = {"command": "ddp", "framework": args.framework, "nproc": args.nproc, "bucket_cap_mb": args.bucket_cap_mb,
              "one_process_median_s": one["median_s"], "ranks_median_s": ranks["median_s"],
              "ddp_overhead_ratio": ranks["median_s"] / one["median_s"], "independent_median_s": independent,
              "ddp_over_independent": ranks["median_s"] / independent, "params": one["params"],
              "machine": one["machine"]}
    if "allreduce_alone_s" in ranks:
        # the communication a step did not hide: the wait at the end of backward of the rank that got there last
        # (the others' waits include the time they waited for it); the median over the timed steps
        steps = list(zip(*(rank["waits"] for rank in found["ranks"])))[args.warmup:args.warmup + args.reps]
        wait = statistics.median(min(waits) for waits in steps)
        result.update(buckets=ranks["buckets"], allreduce_alone_s=ranks["allreduce_alone_s"], end_wait_s=wait,
                      hidden_fraction=1 - wait / ranks["allreduce_alone_s"],
                      mpi_async_progress=bool(args.mpi_async_progress))
    return result


WORKLOADS = {"attention": attention_step, "train-step": train_step, "matmul": matmul_step, "ddp": ddp_rank_step}


def measure(args):
    work = Workload(args.framework, args.device)
    if args.framework != "torch":
        import tinyattn as ta
        ta.manual_seed(0)
        ta.cpu.tune_allocator()         # as a training script would (tinyattn never changes the allocator by itself)
    step, info = WORKLOADS[args.command](work, args)
    rss_before = peak_rss_mib()
    times = []
    for i in range(args.warmup + args.reps):
        work.sync()
        start = time.perf_counter()
        step()
        work.sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    result = {"command": args.command, "framework": args.framework, "device": args.device,
              "median_s": median, "min_s": min(times), "reps": len(times),
              "extra_mib": peak_rss_mib() - rss_before, **info}
    if args.device == "cpu":
        result["traced_peak_mib"] = work.traced_peak_mib(step)
    if args.device == "cuda":
        result["gpu_pool_peak_mib"] = work.pool_peak_mib(step)
    if args.profile:
        result["profile"] = profile_steps(work, step, args.reps)
    if args.command in ("train-step", "ddp"):
        result["median_step_s"] = median
    if "approx_flops" in result:
        result["gflops_per_s"] = result["approx_flops"] / median / 1e9
    result.update({k: v for k, v in vars(args).items() if k not in result and v is not None})
    result["machine"] = machine(work)
    return result


def profile_steps(work, step, steps):
    """The step run `steps` more times under a profiler, its table printed to stderr and its numbers returned for
    the JSON: tinyattn's own (tinyattn.tools.profiler: per Function, alone and shared among the threads), or, for the
    PyTorch peer, torch.profiler's operators by their own CPU time."""
    if work.framework == "torch":
        with work.torch.profiler.profile() as torch_profile:
            for _ in range(steps):
                step()
        events = sorted(torch_profile.key_averages(), key=lambda event: -event.self_cpu_time_total)[:25]
        rows = [{"name": event.key, "calls": event.count / steps, "self_ms": event.self_cpu_time_total / 1e3 / steps}
                for event in events]
        print(f"{'per step':60s} {'calls':>6s} {'self ms':>9s}", file=sys.stderr)
        for row in rows:
            print(f"{row['name'][:60]:60s} {row['calls']:6.1f} {row['self_ms']:9.2f}", file=sys.stderr)
        return {"operators": rows}
    from . import profiler
    with profiler.profile() as report:
        for _ in range(steps):
            step()
    print(report.table(steps), file=sys.stderr)
    return report.summary(steps)


def machine(work):
    """What the numbers ran on: CPU model and vector ISA, and the framework's own view of its threads and kernels."""
    from . import environment
    model, isa = environment.cpu_model()
    if work.framework == "torch":
        torch = work.torch
        return {"cpu": model, "isa": isa, "torch": torch.__version__, "threads": torch.get_num_threads(),
                "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    return environment.describe(work.device)


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tinyattn.bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    common.add_argument("--framework", default="tinyattn", choices=["tinyattn", "torch"])
    common.add_argument("--warmup", type=int, default=1)
    common.add_argument("--profile", action="store_true",
                        help="then run the steps again under a profiler and print where their time goes (stderr): "
                             "per Function, alone and shared among the threads (torch: per operator)")
    attention = sub.add_parser("attention", parents=[common], help="forward+backward of float32 attention")
    attention.add_argument("--impl", default="flash", choices=["flash", "blockwise", "sdpa", "reference", "naive"],
                           help="flash: the fused CUDA kernels where they apply (on the GPU), else blockwise; "
                                "blockwise: flash attention in array ops; sdpa: F.scaled_dot_product_attention, "
                                "the score matrix in parts on the CPU (leaving out keys a causal mask hides); naive: "
                                "the old name of sdpa; "
                                "reference: its reference twin, the whole score matrix at once (the torch peer "
                                "always runs its own SDPA)")
    attention.add_argument("--n", type=int, default=1024)
    attention.add_argument("--heads", type=int, default=8)
    attention.add_argument("--kv-heads", type=int, default=None)
    attention.add_argument("--dim", type=int, default=64)
    attention.add_argument("--batch", type=int, default=1)
    attention.add_argument("--causal", action="store_true")
    attention.add_argument("--block-size", type=int, default=None,
                           help="flash attention's rows and keys per block (default: flash_attention's choice)")
    attention.add_argument("--reps", type=int, default=3)
    train = sub.add_parser("train-step", parents=[common], help="AdamW steps of a GPT on random token ids")
    train.add_argument("--vocab", type=int, default=256)
    train.add_argument("--d-model", type=int, default=128)
    train.add_argument("--layers", type=int, default=4)
    train.add_argument("--heads", type=int, default=4)
    train.add_argument("--seq", type=int, default=128)
    train.add_argument("--batch", type=int, default=8)
    train.add_argument("--steps", dest="reps", type=int, default=5)
    train.add_argument("--impl", default="sdpa", choices=["flash", "sdpa", "naive"],
                       help="the GPT's attention (models.GPTConfig's impl; naive: the old name of sdpa)")
    ddp = sub.add_parser("ddp", parents=[common], help="the train step on N ranks (DistributedDataParallel, one "
                         "thread each) against one process on a rank's share of the batch")
    for name, default in (("--vocab", 256), ("--d-model", 128), ("--layers", 4), ("--heads", 4), ("--seq", 128),
                          ("--batch", 8)):
        ddp.add_argument(name, type=int, default=default, help="--batch: each rank's" if name == "--batch" else None)
    ddp.add_argument("--steps", dest="reps", type=int, default=5)
    ddp.add_argument("--impl", default="sdpa", choices=["flash", "sdpa", "naive"],
                     help="the GPT's attention (models.GPTConfig's impl; naive: the old name of sdpa)")
    ddp.add_argument("--nproc", type=int, default=2, help="how many ranks")
    ddp.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ddp.add_argument("--mpi-async-progress", action="store_true",
                     help="MPICH's progress thread (MPIR_CVAR_ASYNC_PROGRESS=1) instead of Test() calls in the hooks")
    ddp.add_argument("--as-rank", action="store_true", help=argparse.SUPPRESS)
    mm = sub.add_parser("matmul", parents=[common], help="a large float32 matmul: the machine's FLOP rate")
    mm.add_argument("--n", type=int, default=2048)
    mm.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    if getattr(args, "impl", None) == "naive":       # its old name (nn/attention.py's IMPL_ALIASES), recorded as sdpa
        args.impl = "sdpa"
    if args.command in ("train-step", "ddp") and "--warmup" not in argv:
        args.warmup = 2
    flags = {action.dest: action.option_strings[0] for action in sub.choices[args.command]._actions
             if action.option_strings}
    errors = user_errors(args, flags)
    if errors:
        for error in errors:
            print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        sys.exit(2)
    return args


def user_errors(args, flags):
    """What is wrong with the arguments, one sentence each (none: they are fine), checked before anything runs;
    flags names each argument's option (--steps sets reps)."""
    errors = [f"{flags[name]} must be at least {low}, got {getattr(args, name)}"
              for name, low in (("n", 1), ("heads", 1), ("dim", 1), ("batch", 1), ("block_size", 1), ("reps", 1),
                                ("warmup", 0), ("vocab", 1), ("d_model", 1), ("layers", 1), ("seq", 1),
                                ("nproc", 1))
              if getattr(args, name, None) is not None and getattr(args, name) < low]
    if args.command == "attention" and args.kv_heads is not None:
        if args.kv_heads < 1 or args.heads % args.kv_heads:
            errors.append(f"--kv-heads must be at least 1 and divide --heads (grouped-query attention), got "
                          f"--heads {args.heads} --kv-heads {args.kv_heads}")
    if args.command in ("train-step", "ddp") and args.heads >= 1 and args.d_model % args.heads:
        errors.append(f"--d-model must be a multiple of --heads, got --d-model {args.d_model} --heads {args.heads}")
    if args.framework == "torch":
        try:
            import torch
        except ImportError:
            return errors + ["--framework torch needs PyTorch, which this environment does not have"]
        gpu = torch.cuda.is_available()
    else:
        from tinyattn import cuda_is_available
        gpu = cuda_is_available()
    if args.profile and args.device != "cpu":
        errors.append("--profile times the CPU's work: run it with --device cpu")
    if args.device == "cuda" and not gpu:
        errors.append(f"--device cuda: {args.framework} sees no GPU here (run with --device cpu)")
    return errors


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    result = ddp_compare(args) if args.command == "ddp" and not args.as_rank else measure(args)
    sys.stdout.flush()
    sys.stdout.write(json.dumps(result) + "\n")      # the line whole, then flushed at once: the lines of ranks
    sys.stdout.flush()                                 # never mix (and sys.stdout, not fd 1: callers may capture it)
    return result


if __name__ == "__main__":
    main()
