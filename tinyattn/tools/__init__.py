"""Tools beside the engine, for measuring it: bench.py (`python -m tinyattn.bench`), bench_rounds.py (the performance
method of docs/performance.md in one command, `python -m tinyattn.bench_rounds`), profiler.py (where a step's time
goes, Function by Function) and environment.py (what a run ran on: CPU, BLAS, threads, device). Nothing in the
engine imports them. (What a graph keeps for backward, `ta.memory_report`, reads only the engine and sits beside it,
in tinyattn/memory.py, as gradcheck.py does.)"""
