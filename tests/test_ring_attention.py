"""Ring attention (tinyattn/distributed/ring_attention.py): on 1, 2 and 3 ranks started by mpiexec (3 oversubscribed
on 2 cores), every rank's output and gradients equal attention on the whole sequence (tests/ring_attention_ranks.py
asserts them on each rank); in this process, a world of 1, gradcheck and the refusals."""
import pytest

import tinyattn as ta
import tinyattn.distributed as dist
from tinyattn.distributed.ring_attention import _block_pairs, ring_attention, sequence_indices, sequence_pieces
from test_distributed import HERE, ranks

pytest.importorskip("mpi4py", reason='tinyattn.distributed needs mpi4py: pip install -e ".[distributed]"')


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ring_attention_on_ranks_equals_attention_on_the_whole_sequence(n):
    result = ranks(n, str(HERE / "ring_attention_ranks.py"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(line for line in result.stdout.splitlines() if " ok" in line) == [f"rank {r} ok" for r in range(n)]


@pytest.fixture
def world_of_one():
    dist.init_process_group(backend="mpi")
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("twin", [False, True], ids=["fast", "reference"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_gradcheck_in_a_world_of_one(world_of_one, is_causal, twin):
    ta.manual_seed(2)
    q, k = (ta.randn(2, 4, 3).double().requires_grad_() for _ in range(2))
    v = ta.randn(2, 4, 5).double().requires_grad_()
    with ta.reference(twin):
        assert ta.gradcheck(lambda *t: ring_attention(*t, is_causal=is_causal, layout="zigzag"), (q, k, v))


def test_pieces_and_the_causal_work_each_layout_gives_each_rank():
    assert sequence_pieces(12, 1, 3) == [(4, 8)]
    assert sequence_pieces(12, 1, 3, "zigzag") == [(2, 4), (8, 10)]
    assert sequence_indices(8, 0, 2, "zigzag").tolist() == [0, 1, 6, 7]
    # the scores each rank computes under a causal mask over the whole ring (length 32 on 4 ranks): contiguous
    # rank r 64 (r + 1), the last one 4 times the first; zigzag 144 on each (its diagonal blocks are smaller)
    for layout, work in (("contiguous", [64, 128, 192, 256]), ("zigzag", [144] * 4)):
        scores = [sum((rows.stop - rows.start) * (cols.stop - cols.start) for s in range(4)
                      for rows, cols, _ in _block_pairs(r, s, 8, 4, layout, True)) for r in range(4)]
        assert scores == work, (layout, scores)
    with pytest.raises(ValueError, match='layout "zigzag" cuts the sequence into 6 equal chunks on a world of 3: '
                                         "the length 9 is not a multiple of 6"):
        sequence_pieces(9, 0, 3, "zigzag")


def test_bad_inputs_are_refused_naming_them(world_of_one):
    q = ta.zeros(2, 4, 3)
    with pytest.raises(ValueError, match=r"\(2, 4, 3\), \(2, 5, 3\) and \(2, 4, 3\)"):
        ring_attention(q, ta.zeros(2, 5, 3), q)
    with pytest.raises(ValueError, match="float32, float64 and float32"):
        ring_attention(q, q.double(), q)
    with pytest.raises(ValueError, match="layout must be one of"):
        ring_attention(q, q, q, layout="striped")
    with pytest.raises(ValueError, match="the length 3 is not a multiple of 2"):
        ring_attention(ta.zeros(3, 2), ta.zeros(3, 2), ta.zeros(3, 2), layout="zigzag")


def test_lesson_22_on_two_ranks_holds_its_claims(tmp_path):
    """The lesson's quick run under the launcher, as a learner starts it: its asserts hold on both ranks, rank 0
    alone prints, and its RESULT carries the issue's keys with the exact ones below 1e-12."""
    import json
    result = ranks(2, str(HERE.parent / "lessons" / "22_many_processes.py"), "--quick", launcher=True,
                   env={"TINYATTN_PLOTS": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1 and "a world of 2 ranks" in result.stdout
    metrics = json.loads(lines[0][len("RESULT "):])
    assert metrics["world_size"] == 2 and metrics["zero_state_bytes_ratio"] < 1
    assert max(metrics[k] for k in ("ddp_max_param_diff", "ring_allreduce_max_error", "ring_attention_max_error")) \
        < 1e-12
    assert 0 <= metrics["overlap_fraction"] <= 1
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["22_allreduce_alpha_beta.png",
                                                               "22_ring_allreduce_steps.png"]


def test_lesson_22_as_the_sites_notebook_from_two_ranks(tmp_path):
    """lessons/ranks_notebook.py, which the site's hooks run for lesson 22's page: the lesson's cells, each code cell
    with rank 0's printed output (a world of 2) and its figures inline, and no RESULT line (as in a notebook)."""
    import json
    from lessons.cells import raw_cells
    out = tmp_path / "22.ipynb"
    lesson = HERE.parent / "lessons" / "22_many_processes.py"
    done = ranks(2, "-m", "lessons.ranks_notebook", str(lesson), str(out), launcher=True,
                 env={"TINYATTN_QUICK": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    cells = json.loads(out.read_text())["cells"]
    assert [c["cell_type"] for c in cells] == [kind for kind, _, _ in raw_cells(lesson)]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    printed = "".join(t for c in code for o in c["outputs"] if o["output_type"] == "stream" for t in o["text"])
    assert "a world of 2 ranks" in printed and "RESULT" not in printed and "figure: " not in printed
    assert printed.count(" · seed ") == 1                          # rank 0's lines only
    assert sum(o["output_type"] == "display_data" for c in code for o in c["outputs"]) == 2
