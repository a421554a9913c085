"""Tools beside the engine, for measuring it: bench.py (`python -m tinyattn.bench`), bench_rounds.py (the README's
performance method in one command, `python -m tinyattn.bench_rounds`), profiler.py (where a step's time goes,
Function by Function), memory.py (what a graph keeps for backward, `ta.memory_report`) and environment.py (what a
run ran on: CPU, BLAS, threads, device). Nothing in the engine imports them."""
