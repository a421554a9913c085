"""`python -m tinyattn.bench` runs tinyattn.tools.bench, where it lives with the other tools."""
import runpy

if __name__ == "__main__":
    runpy.run_module("tinyattn.tools.bench", run_name="__main__", alter_sys=True)
