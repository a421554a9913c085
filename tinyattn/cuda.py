"""torch.cuda's everyday names, for code that asks about the GPU: is_available, device_count, manual_seed,
synchronize. tinyattn uses one GPU (device 0) through CuPy."""
from . import backend


def is_available():
    return backend.cuda_is_available()


def device_count():
    return 1 if is_available() else 0


def current_device():
    return 0


def get_device_name(device=None):
    if not is_available():
        raise RuntimeError("no CUDA device: CuPy is missing or sees no GPU")
    cupy = backend.xp_for("cuda")
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else name


def manual_seed(seed):
    """Seed the GPU's generator only, as torch.cuda.manual_seed (tinyattn.manual_seed seeds every device's); without
    a GPU it does nothing, as PyTorch's."""
    if is_available():
        backend.manual_seed(seed, "cuda")


manual_seed_all = manual_seed


def synchronize(device=None):
    """Wait until the GPU has finished all the work queued so far (for timing)."""
    if is_available():
        backend.xp_for("cuda").cuda.Device().synchronize()
