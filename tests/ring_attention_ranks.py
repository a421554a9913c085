"""What each rank runs for tests/test_ring_attention.py: `mpiexec -n N python tests/ring_attention_ranks.py`.
Every rank holds its part of one sequence and checks ring attention against attention on the whole sequence; the
last line a rank prints is `rank R ok` (the test reads it)."""
import os

import numpy as np

import tinyattn as ta
import tinyattn.distributed as dist
from tinyattn.distributed.ring_attention import ReferenceRingAttention, RingAttention, ring_attention, \
    sequence_indices, shard_sequence

F = ta.nn.functional


def gathered(local, layout):
    """The whole sequence from every rank's part (dim -2), each row put back at its global position."""
    world = dist.get_world_size()
    parts = [ta.zeros(*local.shape, dtype=local.dtype) for _ in range(world)]
    dist.all_gather(parts, local)
    whole = np.zeros(local.shape[:-2] + (local.shape[-2] * world, local.shape[-1]))
    for r, part in enumerate(parts):
        whole[..., sequence_indices(whole.shape[-2], r, world, layout), :] = part.numpy()
    return whole


def equals_whole_sequence_attention(rank, world):
    """Output and every gradient to 1e-12 in float64, causal and not, both layouts, both twins; the twins' results
    are the same bits (one arithmetic, two orders of sending)."""
    ta.manual_seed(0)                          # the same whole sequence on every rank
    q, k, v = (ta.randn(2, 3, 12, 4).double().requires_grad_() for _ in range(3))
    weights = ta.randn(2, 3, 12, 4).double()   # loss = sum(weights * out), so that every output row matters
    for is_causal in (False, True):
        want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        (want * weights).sum().backward()
        wanted = [want.detach().numpy()] + [t.grad.numpy() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        for layout in ("contiguous", "zigzag"):
            results = {}
            for twin in (False, True):
                mine = [shard_sequence(t, layout).detach().requires_grad_() for t in (q, k, v)]
                with ta.reference(twin):
                    out = ring_attention(*mine, is_causal=is_causal, layout=layout)
                assert out.grad_fn.function is (ReferenceRingAttention if twin else RingAttention)
                (out * shard_sequence(weights, layout)).sum().backward()
                got = [gathered(t, layout) for t in (out.detach(), *(m.grad for m in mine))]
                for name, g, w in zip("out dq dk dv".split(), got, wanted):
                    err = np.abs(g - w).max()
                    assert err < 1e-12, (is_causal, layout, twin, name, err)
                results[twin] = got
            assert all(np.array_equal(a, b) for a, b in zip(results[False], results[True])), (is_causal, layout)


def stays_float32(rank, world):
    ta.manual_seed(1)
    q, k, v = (ta.randn(1, 2 * world, 8).requires_grad_() for _ in range(3))
    out = ring_attention(q, k, v, is_causal=True, layout="zigzag")
    out.sum().backward()
    assert out.dtype == np.float32 and all(t.grad.dtype == np.float32 for t in (q, k, v))
    want = F.scaled_dot_product_attention(*(ta.tensor(gathered(t.detach(), "zigzag")) for t in (q, k, v)),
                                          is_causal=True)
    assert np.abs(gathered(out.detach(), "zigzag") - want.numpy()).max() < 1e-5


if __name__ == "__main__":
    dist.init_process_group(backend="mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    equals_whole_sequence_attention(rank, world)
    stays_float32(rank, world)
    dist.destroy_process_group()
    os.write(1, f"rank {rank} ok\n".encode())     # one write: lines of ranks never mix
