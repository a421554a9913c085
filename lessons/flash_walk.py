"""python -m lessons flash [--n 64] [--block 16] [--dim 8] [--seed 0] [--full]

Walk flash attention's loop tile by tile in the terminal: the library's reference, traced
(tinyattn.functional.trace_flash_attention), one head, causal unless --full. Each forward tile prints, for the query
rows of the tile, the running max m and normaliser l before and after it and the rescale exp(m - m') that the old
sum and output are multiplied by; each backward tile prints the recomputed P's row sums and the rows' dQ
contributions (the walk says what they mean when the backward starts). A meter shows the bytes the loop holds for
the tile against the whole N x N matrix.

Enter goes on to the next tile, q then Enter stops. With input from a pipe (or at its end, or with no input at
all) it goes on by itself; Ctrl-C stops it with one line."""
import argparse
import sys

import numpy as np

from tinyattn.functional import trace_flash_attention
from tinyattn.lesson import stop_interrupted

METER = 30


def meter(held, whole):
    filled = min(METER, max(1, round(METER * held / whole)))         # a tile may hold more than a small matrix
    return f"[{'#' * filled}{'.' * (METER - filled)}] {held:,} of {whole:,} bytes ({held / whole:.1%})"


def _rows(array):
    return np.asarray(array).reshape((-1,) + np.shape(array)[-2:])[0]


# Said once, between the passes: what the forward left, what the backward's columns are, and its order.
BETWEEN_PASSES = [
    "forward done: every row's m + log l is its log-sum-exp L, all that backward keeps besides Q, K, V and O",
    "backward: each tile remakes its P = exp(S - L) from L, exactly the forward's probabilities. 'sum of P here' is",
    "  the share of a row's attention that falls on the tile's keys (a row's shares over its tiles add up to 1);",
    "  '|dQ added|' is the size of the tile's term scale dS K in the row's dQ. The tiles come key block by key",
    "  block: the outer loop runs over the keys, so a key block's dK and dV are summed over the row blocks that see",
    "  it and then written once, while each row's dQ collects a term from every key block it sees.",
]


def describe(record):
    """The lines printed for one record (the first head's rows)."""
    r0, r1 = record["rows"]
    lines = [record["label"], "  the loop holds " + meter(record["tile_bytes"], record["matrix_bytes"])]
    if record["pass"] == "forward":
        m_before, m, l_before, l, alpha = (_rows(record[name])[:, 0]
                                           for name in ("m_before", "m", "l_before", "l", "alpha"))
        if np.isneginf(m_before).all():
            lines.append("  these rows' first tile: no earlier max (m before is -inf), so rescale = exp(-inf - m) = 0: "
                         "no sum to rescale yet")
        lines.append(f"  {'row':>5} {'m before':>10} {'m':>10} {'l before':>10} {'l':>10} {'rescale':>9}")
        lines += [f"  {row:5d} {m_before[i]:10.4f} {m[i]:10.4f} {l_before[i]:10.4f} {l[i]:10.4f} {alpha[i]:9.4f}"
                  for i, row in enumerate(range(r0, r1))]
    else:
        p, dq = _rows(record["p"]), _rows(record["dq"])
        lines.append(f"  {'row':>5} {'sum of P here':>14} {'|dQ added|':>11}")
        lines += [f"  {row:5d} {p[i].sum():14.4f} {np.linalg.norm(dq[i]):11.4f}" for i, row in enumerate(range(r0, r1))]
    return lines


def walk(records, read=input, write=print):
    """Print each record (BETWEEN_PASSES before the backward's first) and wait for a line from read (Enter) between
    them; an empty read at end of input (EOFError) lets the rest run on; "q" stops. Returns how many records were
    shown."""
    waiting = True
    for i, record in enumerate(records):
        starts_backward = record["pass"] == "backward" and (i == 0 or records[i - 1]["pass"] == "forward")
        for line in (BETWEEN_PASSES if starts_backward else []) + describe(record):
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
        shown = walk(trace.records, read_line)
    except KeyboardInterrupt:
        stop_interrupted()
    print(f"done: {shown} of the {len(trace.records)} tiles shown")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
