"""python -m lessons flash [--n 64] [--block 16] [--dim 8] [--seed 0] [--full]

Walk flash attention's loop tile by tile in the terminal: the library's reference, traced
(tinyattn.functional.trace_flash_attention), one head, causal unless --full. Each forward tile prints, for the query
rows of the tile, the running max m and normaliser l before and after it and the rescale exp(m - m') that the old
sum and output are multiplied by; each backward tile prints the recomputed P's row sums and the rows' dQ
contributions. A meter shows the bytes the loop holds for the tile against the whole N x N matrix.

Enter goes on to the next tile, q then Enter stops. With input from a pipe (or at its end, or with no input at
all) it goes on by itself; Ctrl-C stops it with one line."""
import argparse
import sys

import numpy as np

from tinyattn.functional import trace_flash_attention
from tinyattn.lesson import stop_interrupted

METER = 30


def meter(held, whole):
    filled = max(1, round(METER * held / whole))
    return f"[{'#' * filled}{'.' * (METER - filled)}] {held:,} of {whole:,} bytes ({held / whole:.1%})"


def _rows(array):
    return np.asarray(array).reshape((-1,) + np.shape(array)[-2:])[0]


def describe(record, total):
    """The lines printed for one record (the first head's rows)."""
    r0, r1 = record["rows"]
    c0, c1 = record["cols"]
    lines = [f"{record['pass']} tile {record['tile'] + 1} of {total}: query rows {r0}-{r1 - 1} against keys "
             f"{c0}-{c1 - 1}", "  the loop holds " + meter(record["tile_bytes"], record["matrix_bytes"])]
    if record["pass"] == "forward":
        m_before, m, l_before, l, alpha = (_rows(record[name])[:, 0]
                                           for name in ("m_before", "m", "l_before", "l", "alpha"))
        lines.append(f"  {'row':>5} {'m before':>10} {'m':>10} {'l before':>10} {'l':>10} {'rescale':>9}")
        lines += [f"  {row:5d} {m_before[i]:10.4f} {m[i]:10.4f} {l_before[i]:10.4f} {l[i]:10.4f} {alpha[i]:9.4f}"
                  for i, row in enumerate(range(r0, r1))]
    else:
        p, dq = _rows(record["p"]), _rows(record["dq"])
        lines.append(f"  {'row':>5} {'sum of P here':>14} {'|dQ added|':>11}")
        lines += [f"  {row:5d} {p[i].sum():14.4f} {np.linalg.norm(dq[i]):11.4f}" for i, row in enumerate(range(r0, r1))]
    return lines


def walk(records, read=input, write=print):
    """Print each record and wait for a line from read (Enter) between them; an empty read at end of input (EOFError)
    lets the rest run on; "q" stops. Returns how many records were shown."""
    waiting = True
    for i, record in enumerate(records):
        total = sum(r["pass"] == record["pass"] for r in records)
        for line in describe(record, total):
            write(line)
        if waiting and i + 1 < len(records):
            try:
                answer = read("Enter: next tile, q: quit > ")
            except EOFError:
                waiting = False
                write("")
                continue
            if answer.strip().lower() == "q":
                return i + 1
    return len(records)


def read_line(prompt):
    """input(prompt), ending the prompt's line where the input does not echo one (a pipe). No input at all (stdin
    closed: `<&-`) reads as the end of input."""
    if sys.stdin is None or sys.stdin.closed:
        raise EOFError
    answer = input(prompt)
    if not sys.stdin.isatty():
        print()
    return answer


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m lessons flash", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=64, help="queries and keys (default 64)")
    parser.add_argument("--block", type=int, default=16, help="rows and keys per tile (default 16)")
    parser.add_argument("--dim", type=int, default=8, help="head size (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full", action="store_true", help="no causal mask: every tile is visited")
    args = parser.parse_args(argv)
    if args.n < 1 or args.block < 1 or args.dim < 1:
        parser.error(f"--n, --block and --dim must be positive, got {args.n}, {args.block}, {args.dim}")
    try:
        rng = np.random.default_rng(args.seed)
        q, k, v = (rng.standard_normal((1, 1, args.n, args.dim)) for _ in range(3))
        trace = trace_flash_attention(q, k, v, is_causal=not args.full, block_size=args.block)
        print(f"flash attention, N = {args.n}, tiles of {args.block}, head size {args.dim}, "
              f"{'all tiles' if args.full else 'causal: tiles above the diagonal skipped'}; float64")
        walk(trace.records, read_line)
    except KeyboardInterrupt:
        stop_interrupted()
    print("done: every row's m + log l is its log-sum-exp L, all that backward kept besides Q, K, V and O")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
