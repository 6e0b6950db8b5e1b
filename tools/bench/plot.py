#!/usr/bin/env python3
"""Plots and a headline table from bench results (JSON lines written by the
benches and peer scripts with ATTNC_BENCH_JSON set; tools/bench/results.py).

    python3 tools/bench/plot.py RESULTS.jsonl... -o docs/plots [--table]

One PNG per (bench, dtype, head dim, mask): TFLOPS against sequence length,
one line per implementation (attnc and each peer). The memory-bound benches
(decode, linear attention: rows with "gbps" and no TFLOPS) plot GB/s
instead, S being their key or token count. With --table, a Markdown table of
every shape: attnc, the best peer and attnc / best peer. Needs matplotlib
for the plots (a documentation tool; no test or build uses it).
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import load  # noqa: E402


def groups(rows):
    """Rows by (bench, dtype, D, DV, mask), then by implementation."""
    out = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in rows:
        key = (r["bench"], r["dtype"], r["D"], r["DV"], r["mask"])
        # A later row of the same shape replaces an earlier one (a rerun).
        out[key][r["impl"]][r["S"]] = r
    return out


def metric(by_impl):
    """"tflops", or "gbps" for a group of memory-bound rows (no TFLOPS)."""
    rows = [r for by_s in by_impl.values() for r in by_s.values()]
    if any(r.get("tflops", 0) > 0 for r in rows):
        return "tflops"
    return "gbps" if any(r.get("gbps", 0) > 0 for r in rows) else "tflops"


UNITS = {"tflops": "TFLOPS", "gbps": "GB/s"}


def title(key, rows):
    bench, dtype, d, dv, mask = key
    any_row = next(iter(next(iter(rows.values())).values()))
    dims = f"D{d}" if d == dv else f"D{d}/{dv}"
    return (f"{bench} {mask} {dtype} H{any_row['H']} {dims}, B·S fixed — "
            f"{any_row['card']}, {any_row['date']}")


def plot(key, by_impl, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rate = metric(by_impl)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for impl in sorted(by_impl, key=lambda i: (i != "attnc", i)):
        points = sorted(by_impl[impl].items())
        ax.plot([s for s, _ in points], [r.get(rate, 0) for _, r in points],
                marker="o", linewidth=2.5 if impl == "attnc" else 1.5,
                label=impl)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length")
    ax.set_ylabel(UNITS[rate])
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(title(key, by_impl), fontsize=9)
    bench, dtype, d, dv, mask = key
    dims = f"d{d}" if d == dv else f"d{d}x{dv}"
    path = os.path.join(out_dir, f"{bench}_{mask}_{dtype}_{dims}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table(grouped):
    lines = ["| bench | mask | dtype | shape | attnc TFLOPS | best peer | "
             "peer TFLOPS | attnc / peer |",
             "|---|---|---|---|---|---|---|---|"]
    for key in sorted(grouped):
        bench, dtype, d, dv, mask = key
        by_impl = grouped[key]
        rate = metric(by_impl)
        # TFLOPS bare (the columns' unit); a memory-bound group's GB/s named.
        unit = "" if rate == "tflops" else " GB/s"
        for s in sorted(by_impl.get("attnc", {})):
            mine = by_impl["attnc"][s]
            peers = [(r.get(rate, 0), impl) for impl, rs in by_impl.items()
                     if impl != "attnc" and s in rs for r in [rs[s]]]
            shape = f"B{mine['B']} H{mine['H']} S{s} D{d}" + (
                "" if d == dv else f"/{dv}")
            if not peers:
                lines.append(f"| {bench} | {mask} | {dtype} | {shape} | "
                             f"{mine.get(rate, 0):.0f}{unit} | — | — | — |")
                continue
            best, name = max(peers)
            lines.append(f"| {bench} | {mask} | {dtype} | {shape} | "
                         f"{mine.get(rate, 0):.0f}{unit} | {name} | "
                         f"{best:.0f}{unit} | "
                         f"{mine.get(rate, 0) / best:.2f}× |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("-o", "--out", help="folder for the PNGs")
    ap.add_argument("--table", action="store_true",
                    help="print the Markdown headline table")
    args = ap.parse_args()
    grouped = groups(load(args.results))
    if not grouped:
        sys.exit("plot.py: no rows in " + ", ".join(args.results))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for key in sorted(grouped):
            print("wrote", plot(key, grouped[key], args.out))
    if args.table:
        print(table(grouped))


if __name__ == "__main__":
    main()
