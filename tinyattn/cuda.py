"""torch.cuda's everyday names, for code that asks about the GPU: is_available, device_count, set_device,
manual_seed, synchronize, empty_cache, is_bf16_supported, and amp.GradScaler's interface. tinyattn uses one GPU
(device 0) through CuPy."""
import warnings
from types import SimpleNamespace

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


def set_device(device):
    """Choose the GPU later work runs on: here there is one, device 0 ("cuda", "cuda:0", 0 or such a device)."""
    if not is_available():
        raise RuntimeError(f"set_device({device!r}): no CUDA device (CuPy is missing or sees no GPU)")
    index = device if isinstance(device, int) else backend.device(device).index
    if index not in (None, 0) or not isinstance(device, int) and backend.device(device).type != "cuda":
        raise RuntimeError(f"set_device({device!r}): tinyattn uses one GPU, device 0 (cuda:0)")


def is_bf16_supported():
    """False: NumPy and CuPy have no bfloat16 dtype."""
    return False


def empty_cache():
    """Give the GPU memory CuPy keeps for reuse back to the device (nothing to do without a GPU)."""
    if is_available():
        backend.xp_for("cuda").get_default_memory_pool().free_all_blocks()


class GradScaler:
    """torch.cuda.amp.GradScaler's interface, without its scaling: there is no autocast here, so parameters and their
    gradients stay float32, where scaling the loss up and the gradients back down changes nothing. Code written for
    mixed precision (scaler.scale(loss).backward(); scaler.unscale_(opt); scaler.step(opt); scaler.update()) then
    trains in float32. enabled=True says so with a warning, as PyTorch's scaler does where it cannot scale."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        if enabled:
            warnings.warn("GradScaler is enabled, but tinyattn has no mixed precision (gradients stay float32, where "
                          "loss scaling changes nothing). Disabling.", stacklevel=2)

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        pass

    def get_scale(self):
        return 1.0

    def is_enabled(self):
        return False

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass


amp = SimpleNamespace(GradScaler=GradScaler)
