"""What a run ran on: tinyattn's and NumPy's versions, the CPU model and its widest vector instructions, NumPy's BLAS
and the kernel it picked for this CPU, threads, and the device. Lessons print it first; the benchmark records it, so
that every number can be tied to its machine."""
import os
import platform

import numpy

from .. import backend, cpu


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name (from /proc/cpuinfo on Linux) with its x86 family and model numbers, and its widest
    vector ISA (AVX-512, AVX2, ...). A virtual machine often names only the line ("AMD EPYC"); the numbers tell its
    generations apart (e.g. family 25 model 1 is a Zen 3, model 17 a Zen 4; family 26 is Zen 5)."""
    fields, flags = {}, set()
    if os.path.exists(cpuinfo):
        with open(cpuinfo) as info:
            for text in info:
                key, _, value = (part.strip() for part in text.partition(":"))
                if key in ("model name", "cpu family", "model"):
                    fields.setdefault(key, value)
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    widest_first = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"), ("asimd", "NEON"),
                    ("neon", "NEON"))                                 # asimd: 64-bit ARM; neon: 32-bit
    isa = next((name for flag, name in widest_first if flag in flags), "unknown")
    model = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        model += f", family {fields['cpu family']} model {fields['model']}"
    return model, isa


def blas():
    """NumPy's BLAS library: its name, version and the kernel it chose for this CPU (from threadpoolctl)."""
    from threadpoolctl import threadpool_info
    for library in threadpool_info():
        if library.get("user_api") == "blas":
            return {"name": library.get("internal_api"), "version": library.get("version"),
                    "kernel": library.get("architecture"), "threads": library.get("num_threads")}
    return {"name": "unknown"}


# x86 kernels of OpenBLAS without AVX-512. OPENBLAS_CORETYPE forces one of them whatever the CPU can do: some
# machines set it (older OpenBLAS builds misbehave on new CPUs), and a current NumPy then runs its matmuls at half
# the speed an AVX-512 kernel reaches (measured on an AMD EPYC Zen 5: 121 against 230 GFLOP/s per core).
_WITHOUT_AVX512 = {"Haswell", "Zen", "SandyBridge", "Sandybridge", "Nehalem", "Prescott", "Core2", "Barcelona"}


def numpy_simd():
    """The SIMD targets NumPy's own loops (exp, add, sum, ...) dispatch to on this CPU, widest last.

    NumPy compiles each loop for several targets and picks the widest the CPU has at import, unless
    NPY_DISABLE_CPU_FEATURES names some: then an AVX-512 CPU runs NumPy's loops as an AVX2 one would."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:                                   # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    return [target for target in umath.__cpu_dispatch__ if umath.__cpu_features__.get(target)]


def blas_note(described):
    """A sentence when OPENBLAS_CORETYPE holds NumPy's OpenBLAS to kernels narrower than the CPU's vectors."""
    d, b = described, described["blas"]
    if d["isa"] == "AVX-512" and b.get("name") == "openblas" and b.get("kernel") in _WITHOUT_AVX512 \
            and d["openblas_coretype"]:
        return (f"note: OPENBLAS_CORETYPE={d['openblas_coretype']} in the environment holds NumPy's OpenBLAS to its "
                f"{b['kernel']} (AVX2) kernel on this AVX-512 CPU; matmuls here run at about half the speed they "
                "could, and this run's timings reflect that")
    return None


def describe(device=None):
    """A dict of all of it."""
    import tinyattn
    model, isa = cpu_model()
    return {"tinyattn": tinyattn.__version__, "numpy": numpy.__version__, "cpu": model, "isa": isa,
            "cores": os.cpu_count(), "threads": cpu.get_num_threads(), "blas": blas(),
            "device": str(device or backend.default_device()),
            "numpy_simd": numpy_simd(), "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "npy_disable_cpu_features": os.environ.get("NPY_DISABLE_CPU_FEATURES")}


def line(described):
    """One line of it, for the top of a lesson's output."""
    d, b = described, described["blas"]
    simd = d["numpy_simd"][-1] if d["numpy_simd"] else "baseline"
    return (f"tinyattn {d['tinyattn']} · NumPy {d['numpy']} ({simd} loops) · {b.get('name')} {b.get('version')} "
            f"({b.get('kernel')} kernel) · {d['cpu']} ({d['isa']}) · {d['threads']} threads · device {d['device']}")
