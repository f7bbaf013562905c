#!/usr/bin/env python3
"""Per-kernel breakdown of one fused propose from an ncu CSV.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      build/sparkdraft bench step --preset qwen3-8b --rows 1 --repeats 1 > ncu.csv
  tools/ncu_step_breakdown.py ncu.csv [--all]

ncu runs every kernel on its own with the caches flushed, so the sum is an upper
bound of the graph's time (no overlap, no warm L2). The propose taken is the last
one in the file that ran the fused fronts: from the prepare_kernel before its
embed_norm_kernel to the end of the fused Markov steps that follow. Prints the
time per kernel family (count, total us, share) and, with --all, every launch.
"""
import collections
import csv
import re
import sys


def kernels(path):
    out = []
    with open(path, newline="") as f:
        for line in f:
            if '"gpu__time_duration.sum"' not in line:
                continue
            row = next(csv.reader([line]))
            name = re.sub(r"\(.*", "", row[4])
            name = re.sub(r"^void ", "", name)
            name = re.sub(r"(sparkdraft::|cuda::|\w+_detail::|<?unnamed>::|\(anonymous namespace\)::)", "", name)
            scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "ms": 1e3}.get(row[-2], 1e-3)
            out.append((name.strip("<> "), float(row[-1].replace(",", "")) * scale))
    return out


def last_propose(ks):
    fronts = [i for i, (n, _) in enumerate(ks) if "embed_norm_kernel" in n]
    if not fronts:
        sys.exit("no embed_norm_kernel in the profile: was the fused backend profiled?")
    begin = fronts[-1]
    while begin > 0 and "prepare_kernel" not in ks[begin][0]:
        begin -= 1
    end = fronts[-1]
    while end < len(ks) and "fused_step_kernel" not in ks[end][0]:
        end += 1
    while end < len(ks) and "fused_step_kernel" in ks[end][0]:
        end += 1
    return ks[begin:end]


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    step = last_propose(kernels(sys.argv[1]))
    total = sum(t for _, t in step)
    fam = collections.OrderedDict()
    for n, t in step:
        c, s = fam.get(n, (0, 0.0))
        fam[n] = (c + 1, s + t)
    print(f"{len(step)} kernels, {total:.1f} us (each on its own, caches flushed)")
    print(f"{'kernel':58s} {'calls':>5s} {'us':>9s} {'share':>6s}")
    for n, (c, s) in sorted(fam.items(), key=lambda x: -x[1][1]):
        print(f"{n[:58]:58s} {c:5d} {s:9.1f} {100 * s / total:5.1f}%")
    if "--all" in sys.argv:
        for n, t in step:
            print(f"  {n[:70]:70s} {t:8.1f}")


if __name__ == "__main__":
    main()
