#!/usr/bin/env python3
"""Stall samples of ncu source pages (`ncu -i R.ncu-rep --page source --csv --print-source sass`,
from a report taken with `--set full --import-source yes`): for each page, the stall reasons over
the kernel, the hottest instructions with the three before each, and the samples by how often an
instruction ran (a proxy for the code region: a main loop's instructions run once a warp and
stage, a prologue's or an epilogue's once a warp).

  python3 tools/ncu_stalls.py "o_proj=logs/k1_sass.csv" "down=logs/k2_sass.csv"

Exits 2 on a bad argument or a file that is not such a page."""
import collections
import csv
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    if len(rows) < 2:
        print(f"ncu_stalls.py: {path} is not an ncu source page (fewer than two rows)", file=sys.stderr)
        sys.exit(2)
    hdr = rows[1]
    return hdr, [r for r in rows[2:] if len(r) >= len(hdr)]


def report(name, path, top=4, counts=5):
    hdr, data = load(path)
    idx = {h: i for i, h in enumerate(hdr)}
    need = ("Warp Stall Sampling (All Samples)", "Instructions Executed", "Source")
    if any(h not in idx for h in need):
        print(f"ncu_stalls.py: {path} is not an ncu source page (no {need} columns)", file=sys.stderr)
        sys.exit(2)
    samples = lambda r: int(r[idx[need[0]]] or 0)
    total = max(1, sum(samples(r) for r in data))
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not" not in h]
    by_reason = collections.Counter()
    for r in data:
        for h in stalls:
            by_reason[h] += int(r[idx[h]] or 0)
    print(f"{name}: {total} samples, {len(data)} SASS instructions")
    for h, v in by_reason.most_common(6):
        print(f"  {h:24s} {100 * v / total:5.1f}%")
    print("  hottest instructions (samples, executions, instruction; the three before it):")
    hot = sorted(range(len(data)), key=lambda i: -samples(data[i]))[:top]
    for i in sorted(hot):
        for j in range(max(0, i - 3), i + 1):
            r = data[j]
            mark = ">" if j == i else " "
            print(f"   {mark} {100 * samples(r) / total:5.1f}% {r[idx[need[1]]]:>6s}  "
                  f"{r[idx['Source']].strip()[:80]}")
    by_count = collections.Counter()
    for r in data:
        by_count[r[idx[need[1]]]] += samples(r)
    print("  samples by executions of the instruction:",
          ", ".join(f"{k}: {100 * v / total:.1f}%" for k, v in by_count.most_common(counts)))


if __name__ == "__main__":
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        report(name, path)
