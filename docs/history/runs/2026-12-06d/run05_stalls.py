#!/usr/bin/env python3
"""Stall samples of run 5's ncu source pages (k1: gemm_wg_kernel<2, 128, false, true, 2>, o_proj at
224 tokens; k2: gemm_wg_kernel<1, 224, false, false, 1>, qkv at 224 tokens): the stall reasons over
the kernel, the hottest instructions with the ones before them, and the samples by how often an
instruction ran (a proxy for the code region: the main loop's instructions run once a warp and
stage). Usage: run05_stalls.py DIR (the unpacked run05_logs.tar.xz's logs/)."""
import collections
import csv
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    hdr = rows[1]
    return hdr, [r for r in rows[2:] if len(r) >= len(hdr)]


def report(name, path):
    hdr, data = load(path)
    idx = {h: i for i, h in enumerate(hdr)}
    samples = lambda r: int(r[idx["Warp Stall Sampling (All Samples)"]] or 0)
    total = sum(samples(r) for r in data)
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not" not in h]
    by_reason = collections.Counter()
    for r in data:
        for h in stalls:
            by_reason[h] += int(r[idx[h]] or 0)
    print(f"{name}: {total} samples, {len(data)} SASS instructions")
    for h, v in by_reason.most_common(6):
        print(f"  {h:24s} {100 * v / total:5.1f}%")
    print("  hottest instructions (samples, executions, instruction; the three before it):")
    hot = sorted(range(len(data)), key=lambda i: -samples(data[i]))[:4]
    for i in sorted(hot):
        for j in range(max(0, i - 3), i + 1):
            r = data[j]
            mark = ">" if j == i else " "
            print(f"   {mark} {100 * samples(r) / total:5.1f}% {r[idx['Instructions Executed']]:>6s}  "
                  f"{r[idx['Source']].strip()[:80]}")
    by_count = collections.Counter()
    for r in data:
        by_count[r[idx["Instructions Executed"]]] += samples(r)
    print("  samples by executions of the instruction:",
          ", ".join(f"{k}: {100 * v / total:.1f}%" for k, v in by_count.most_common(4)))


d = sys.argv[1] if len(sys.argv) > 1 else "logs"
report("k1 gemm_wg_kernel<2, 128, false, true, 2> (o_proj, 224 tokens)", f"{d}/k1_sass.csv")
report("k2 gemm_wg_kernel<1, 224, false, false, 1> (qkv, 224 tokens)", f"{d}/k2_sass.csv")
