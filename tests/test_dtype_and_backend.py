"""float32 stays float32 through forward and backward; the engine takes its array module from the backend."""
import ast
import importlib
import pathlib

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
engine = importlib.import_module("tinyattn.tensor")  # the module; tinyattn.tensor itself is the factory

PACKAGE = pathlib.Path(ta.__file__).parent


@pytest.fixture
def recorded_dtypes(monkeypatch):
    """Every array a Function returns, forward and backward, as (name, dtype)."""
    seen = []
    original_apply = engine.Function.apply.__func__
    original_sum_to_shape = engine._sum_to_shape

    def apply(cls, *args, **kwargs):
        out = original_apply(cls, *args, **kwargs)
        seen.append((cls.__name__ + ".forward", out.dtype))
        return out

    def sum_to_shape(grad, parent, index, node):      # what backward returned, before the engine casts it
        seen.append((node.function.__name__ + ".backward", grad.dtype))
        return original_sum_to_shape(grad, parent, index, node)

    monkeypatch.setattr(engine.Function, "apply", classmethod(apply))
    monkeypatch.setattr(engine, "_sum_to_shape", sum_to_shape)
    return seen


def test_float32_step_never_promotes(recorded_dtypes):
    x = ta.randn(4, 6, 8)
    w1, b1 = ta.randn(16, 8, requires_grad=True), ta.zeros(16, requires_grad=True)
    w2 = ta.randn(8, 16, requires_grad=True)
    gain, ids_weight = ta.ones(8, requires_grad=True), ta.randn(10, 8, requires_grad=True)
    h = F.gelu(F.linear(x, w1, b1)) + F.silu(F.linear(x, w1, b1)) * 0.5
    h = F.layer_norm(F.linear(h, w2) + F.embedding(ta.tensor([[1, 2, 3, 4, 5, 6]] * 4), ids_weight), (8,), gain)
    h = F.rms_norm(h, (8,), gain).tanh().sigmoid() ** 2 / 3.0 + (h - h.mean(dim=-1, keepdim=True)).exp()
    q = h.reshape(4, 2, 3, 8)
    att = F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=0.1)
    logits = F.dropout(att.reshape(-1, 8), 0.1) @ w2.T[:8, :8] + ta.tensor(np.float32(2.0)) * h.var(dim=-1).reshape(-1, 1)
    loss = F.cross_entropy(logits, ta.randint(0, 8, (24,)), label_smoothing=0.1) + F.mse_loss(logits, logits * 0.9)
    loss.backward()
    promoted = sorted({name for name, dtype in recorded_dtypes if dtype == np.float64})
    assert not promoted, f"these promoted float32 to float64: {promoted}"
    assert len(recorded_dtypes) > 50                         # the recording did see the graph
    for p in (w1, b1, w2, gain, ids_weight):
        assert p.grad.dtype == np.float32


def _numpy_imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "numpy" for a in node.names):
            yield node.lineno
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpy":
            yield node.lineno


ENGINE_FILES = ["tensor.py"] + [str(p.relative_to(PACKAGE)) for folder in ("ops", "functional", "nn", "models")
                                for p in sorted(PACKAGE.glob(f"{folder}/*.py"))]


@pytest.mark.parametrize("name", ENGINE_FILES)
def test_engine_takes_its_array_module_from_the_backend(name):
    """Math under the engine goes through backend.xp_of/xp_for, so the same file runs on CuPy."""
    lines = list(_numpy_imports(PACKAGE / name))
    assert not lines, f"{name} imports numpy directly at lines {lines}"


def test_backend_names_devices_and_refuses_unknown():
    assert ta.backend.check_device("cuda:0") == "cuda"
    with pytest.raises(RuntimeError, match="unknown device"):
        ta.backend.check_device("mps")
    assert ta.backend.xp_for("cpu") is np and ta.backend.device_of(np.zeros(1)) == "cpu"


def test_scatter_add_sums_repeats_on_cpu():
    target = np.zeros(3)
    ta.backend.scatter_add(target, np.array([0, 0, 2]), np.array([1.0, 2.0, 5.0]))
    np.testing.assert_array_equal(target, [3.0, 0.0, 5.0])
    # Rows of a matrix (the embedding-gradient path), with repeats, negative indices and an untouched start.
    rng = np.random.default_rng(0)
    rows, values = rng.integers(-6, 6, size=50), rng.standard_normal((50, 4))
    target, expected = np.ones((6, 4)), np.ones((6, 4))
    for r, v in zip(rows, values):
        expected[r] += v
    ta.backend.scatter_add(target, rows, values)
    np.testing.assert_allclose(target, expected, rtol=1e-12)
    ta.backend.scatter_add(target, np.array([], dtype=np.int64), np.zeros((0, 4)))
    np.testing.assert_allclose(target, expected, rtol=1e-12)


def test_cuda_request_without_cupy_says_what_to_install():
    if ta.cuda_is_available():
        pytest.skip("a GPU is here")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="pip install cupy"):
            ta.zeros(2, device="cuda")


@pytest.mark.gpu
def test_scatter_add_sums_repeats_on_gpu():
    import cupy
    target = cupy.zeros(3)
    ta.backend.scatter_add(target, cupy.array([0, 0, 2]), cupy.array([1.0, 2.0, 5.0]))
    np.testing.assert_array_equal(target.get(), [3.0, 0.0, 5.0])


@pytest.mark.gpu
def test_gpu_generator_is_seeded():
    ta.manual_seed(5)
    a = ta.randn(4, device="cuda").numpy()
    ta.manual_seed(5)
    np.testing.assert_array_equal(a, ta.randn(4, device="cuda").numpy())
