"""`python -m tinyattn.bench_rounds` runs tinyattn.tools.bench_rounds, where it lives with the other tools."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tinyattn.tools.bench_rounds", run_name="__main__", alter_sys=True)
