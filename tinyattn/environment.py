"""What a run ran on: tinyattn's and NumPy's versions, the CPU model and its widest vector instructions, NumPy's BLAS
and the kernel it picked for this CPU, threads, and the device. Lessons print it first; the benchmark records it, so
that every number can be tied to its machine."""
import os
import platform

import numpy

from . import backend, cpu


def cpu_model():
    """The CPU's model name (from /proc/cpuinfo on Linux) and its widest vector ISA (AVX-512, AVX2, ...)."""
    model, flags = None, set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as info:
            for text in info:
                key, _, value = (part.strip() for part in text.partition(":"))
                if key == "model name" and model is None:
                    model = value
                elif key == "flags" and not flags:
                    flags = set(value.split())
    isa = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"),
                                        ("asimd", "NEON")) if flag in flags), "unknown")
    return model or platform.processor() or platform.machine(), isa


def blas():
    """NumPy's BLAS library: its name, version and the kernel it chose for this CPU (from threadpoolctl)."""
    from threadpoolctl import threadpool_info
    for library in threadpool_info():
        if library.get("user_api") == "blas":
            return {"name": library.get("internal_api"), "version": library.get("version"),
                    "kernel": library.get("architecture"), "threads": library.get("num_threads")}
    return {"name": "unknown"}


def describe(device=None):
    """A dict of all of it."""
    import tinyattn
    model, isa = cpu_model()
    return {"tinyattn": tinyattn.__version__, "numpy": numpy.__version__, "cpu": model, "isa": isa,
            "cores": os.cpu_count(), "threads": cpu.get_num_threads(), "blas": blas(),
            "device": str(device or backend.default_device())}


def line(device=None):
    """One line of it, for the top of a lesson's output."""
    d = describe(device)
    b = d["blas"]
    return (f"tinyattn {d['tinyattn']} · NumPy {d['numpy']} · {b.get('name')} {b.get('version')} "
            f"({b.get('kernel')} kernel) · {d['cpu']} ({d['isa']}) · {d['threads']} threads · device {d['device']}")
