"""Shared test helpers. The suite runs on the device named by TINYATTN_DEVICE (cpu by default)."""
import numpy as np
import pytest

import tinyattn as ta
from tinyattn import backend


def pytest_collection_modifyitems(config, items):
    if ta.cuda_is_available():
        return
    skip = pytest.mark.skip(reason="needs CuPy and an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seeded():
    ta.manual_seed(0)


@pytest.fixture(autouse=True)
def _fast_path_by_default(monkeypatch):
    """Each test picks its path itself (the fast one by default, `ta.reference()` where it wants the twins), so a
    TINYATTN_REFERENCE=1 left in the shell from a lesson must not turn every fast call into its twin: fast ==
    reference would compare the twins with themselves, and the fast path's own tests would fail."""
    monkeypatch.delenv("TINYATTN_REFERENCE", raising=False)


def randn(*shape, requires_grad=True, dtype="float64", seed=None, device=None):
    """A float64 leaf tensor on the test device (or the one named) with standard normal entries."""
    rng = np.random.default_rng(seed if seed is not None else hash(shape) % 2**32)
    return ta.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=requires_grad, device=device)


def host(t):
    return t.numpy() if isinstance(t, ta.Tensor) else backend.to_host(t)
