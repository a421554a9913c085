"""Where a CPU step's time goes, Function by Function: `python -m tinyattn.bench train-step --profile` prints it.

    with profiler.profile() as report:
        for _ in range(steps):
            step()
    print(report.table(steps))

Inside the block every Function's forward and backward is timed in the calling thread, and so is every share of
work the CPU layer hands to tinyattn's threads (cpu.shares_through); leaving the block puts them back. Per Function:
- alone: time the calling thread spends in it by itself (its Python, and array work it does not share);
- shared: time in its hand-offs, the calling thread working on its own part and then waiting for the helpers;
- hand-offs: how many of its shares some other thread took part in.
Times are exclusive: a Function called inside another counts only for itself. What is in no Function at all (the
modules' Python, the backward walk, the optimizer's Python) is the step's time less everything above. Wall-clock
times in one thread, so a profiled step runs a few percent slower than an unprofiled one; compare rows, not runs.
A helper's Later jobs (a Linear's dW) are not timed: they run beside the calling thread, and a wait for one (the
walk reading dW before a helper has written it) counts in no Function.
"""
import contextlib
import threading
import time

from .. import cpu
from ..tensor import Function

OUTSIDE = "(no Function)"       # the row of shares made outside any Function (the optimizer's), its calls the shares


class Report:
    """What one profile() block measured; rows by name: [calls, alone_s, shared_s, hand_offs]."""

    def __init__(self):
        self.rows, self.total_s, self.waiting_s = {}, 0.0, 0.0

    def _row(self, name):
        return self.rows.setdefault(name, [0, 0.0, 0.0, 0])

    def summary(self, steps=1):
        """The profile per step, in milliseconds: every Function's row, heaviest first, and the totals."""
        rows = [{"name": name, "calls": calls / steps, "alone_ms": alone * 1e3 / steps,
                 "shared_ms": shared * 1e3 / steps, "hand_offs": hand_offs / steps}
                for name, (calls, alone, shared, hand_offs) in self.rows.items()]
        rows.sort(key=lambda row: -(row["alone_ms"] + row["shared_ms"]))
        in_functions = sum(row["alone_ms"] + row["shared_ms"] for row in rows if row["name"] != OUTSIDE)
        outside_shares = sum(row["shared_ms"] for row in rows if row["name"] == OUTSIDE)
        step_ms = self.total_s * 1e3 / steps
        return {"step_ms": step_ms, "functions": rows,
                "alone_ms": sum(row["alone_ms"] for row in rows), "shared_ms": sum(row["shared_ms"] for row in rows),
                "hand_offs": sum(row["hand_offs"] for row in rows), "waiting_ms": self.waiting_s * 1e3 / steps,
                "no_function_ms": step_ms - in_functions - outside_shares}

    def table(self, steps=1):
        """summary() as text: one line per Function, then the totals."""
        summary = self.summary(steps)
        lines = [f"{'per step':44s} {'calls':>6s} {'alone ms':>9s} {'shared ms':>10s} {'hand-offs':>10s}"]
        lines += [f"{row['name']:44s} {row['calls']:6.1f} {row['alone_ms']:9.2f} {row['shared_ms']:10.2f} "
                  f"{row['hand_offs']:10.1f}" for row in summary["functions"]]
        lines += [f"step {summary['step_ms']:.2f} ms: alone in Functions {summary['alone_ms']:.2f}, shared "
                  f"{summary['shared_ms']:.2f} over {summary['hand_offs']:.0f} hand-offs (of it, the calling thread "
                  f"setting up and waiting for the helpers {summary['waiting_ms']:.2f}), in no Function "
                  f"{summary['no_function_ms']:.2f}"]
        return "\n".join(lines)


def _function_classes():
    found, todo = [], [Function]
    while todo:
        for subclass in todo.pop().__subclasses__():
            if subclass not in found:
                found.append(subclass)
                todo.append(subclass)
    return found


@contextlib.contextmanager
def profile():
    """Time every Function and every hand-off of the calling thread inside the block (see the module's docstring);
    yields the Report, complete once the block ends."""
    report, caller, stack = Report(), threading.get_ident(), []     # stack: [name, start, time in children]

    def timed(cls, name, method):
        label = f"{cls.__name__}.{name}"

        def run(*args, **kwargs):
            if threading.get_ident() != caller:
                return method(*args, **kwargs)
            stack.append([label, time.perf_counter(), 0.0])
            try:
                return method(*args, **kwargs)
            finally:
                _, start, children = stack.pop()
                elapsed = time.perf_counter() - start
                if stack:
                    stack[-1][2] += elapsed
                row = report._row(label)
                row[0] += 1
                row[1] += elapsed - children            # the shares in it come off below, as they happen
        return staticmethod(run)

    def timed_share(share, work, items):
        if threading.get_ident() != caller:
            return share(work, items)
        own, helped = [0.0], [False]

        def part(mine):
            if threading.get_ident() != caller:
                helped[0] = True
                return work(mine)
            start = time.perf_counter()
            try:
                return work(mine)
            finally:
                own[0] += time.perf_counter() - start
        start = time.perf_counter()
        try:
            return share(part, items)
        finally:
            elapsed = time.perf_counter() - start
            row = report._row(stack[-1][0] if stack else OUTSIDE)
            if stack:
                row[1] -= elapsed
            else:
                row[0] += 1                             # the (no Function) row counts its shares
            row[2] += elapsed
            row[3] += helped[0]
            report.waiting_s += elapsed - own[0]

    # every class's own entry (to put back) and the method it runs, all found before any is replaced
    saved = [(cls, name, cls.__dict__.get(name), getattr(cls, name))
             for cls in _function_classes() for name in ("forward", "backward")]
    for cls, name, _, method in saved:
        setattr(cls, name, timed(cls, name, method))
    start = time.perf_counter()
    try:
        with cpu.shares_through(timed_share):
            yield report
    finally:
        report.total_s = time.perf_counter() - start
        for cls, name, own, _ in saved:
            if own is None:
                delattr(cls, name)
            else:
                setattr(cls, name, own)
