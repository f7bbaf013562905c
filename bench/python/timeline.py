#!/usr/bin/env python3
"""A timeline of the draft step as it runs: one replay of the backend's CUDA graph (the
bound propose, exactly what `bench step` times as fused_us, with the backend's default
options: programmatic dependent launch in the fused Markov loop only), its kernels' starts and ends
from the CUDA profiling interface (torch.profiler / CUPTI), the gaps between them, and the
kernel count per step (issue 24 point 2: "measure the gaps").

  PYTHONPATH=<pkg> python3 bench/python/timeline.py [--preset qwen3-8b] [--ctx 4096] \\
      [--rows 1 8 32] [--replays 20] [--json out.json] [--md out.md]

For each row count: the replays are profiled back to back with a synchronization between
them; the median replay (by span) is printed kernel by kernel (start and end relative to
the replay's first kernel, the gap before each kernel) and summarised: kernels, span (first
start to last end), busy (the union of kernel intervals), gaps (span - busy). Replays with
a different kernel count than the first are an error (the graph is fixed).
"""

import argparse
import json
import os
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

import sparkdraft

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_propose import checkpoint_of, setup  # noqa: E402  (bench_propose's checkpoint, context, buffers)


def short(name: str) -> str:
    """A kernel's name without namespaces, argument lists and template arguments' noise."""
    for pre in ("void ", "sparkdraft::cuda::", "(anonymous namespace)::", "<unnamed>::"):
        name = name.replace(pre, "")
    return name.split("(")[0][:90]


def replays_of(events, replays):
    """Kernel events (name, start us, end us) split into replays: the profiled region runs
    the replays with a synchronization between them, so each replay is a run of kernels
    separated from the next by the largest gaps."""
    ks = sorted(((e.name, e.time_range.start, e.time_range.end) for e in events), key=lambda k: k[1])
    if not ks:
        raise SystemExit("timeline.py: the profiler recorded no kernels (CUPTI unavailable?)")
    gaps = sorted(range(1, len(ks)), key=lambda i: ks[i][1] - ks[i - 1][2], reverse=True)
    cuts = sorted(gaps[: replays - 1])
    out, last = [], 0
    for c in cuts + [len(ks)]:
        out.append(ks[last:c])
        last = c
    return out


def summary(ks):
    t0 = ks[0][1]
    span = ks[-1][2] - t0
    busy, end = 0.0, t0
    rows = []
    for name, s, e in ks:
        gap = max(0.0, s - end)
        busy += max(0.0, e - max(s, end))
        rows.append(dict(kernel=short(name), start_us=s - t0, end_us=e - t0, dur_us=e - s, gap_us=gap))
        end = max(end, e)
    return dict(kernels=len(ks), span_us=span, busy_us=busy, gaps_us=span - busy, timeline=rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--checkpoint", help="a checkpoint instead of the preset")
    ap.add_argument("--preset-dir", default=tempfile.gettempdir())
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--json", help="write every row count's median replay here")
    ap.add_argument("--md", help="write the per-kernel tables (markdown) here")
    args = ap.parse_args()
    if not sparkdraft.cuda_available():
        sys.exit("timeline.py: needs the CUDA backend and a GPU")
    if args.replays < 1:
        sys.exit("timeline.py: --replays must be >= 1")
    _, ck = checkpoint_of(args)
    flush = torch.empty(2 * 64 * 2**20 // 4, dtype=torch.float32, device="cuda")  # > 2x L2

    results, md = [], []
    for rows in args.rows:
        d, b = setup(ck, rows, args.ctx, args.seed)
        stream = torch.cuda.current_stream().cuda_stream
        bound = d.bind(**b)
        for _ in range(3):  # the first call captures the backend's graph; then warm replays
            bound.propose(rows, stream)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.replays):
                flush.zero_()  # as bench step: each replay starts with a cold L2
                torch.cuda.synchronize()
                bound.propose(rows, stream)
                torch.cuda.synchronize()
        kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                and "memset" not in e.name.lower() and "memcpy" not in e.name.lower()
                and "zero" not in e.name.lower() and "fill" not in e.name.lower()]
        reps = replays_of(kern, args.replays)
        counts = {len(r) for r in reps}
        if len(counts) != 1:
            sys.exit(f"timeline.py: rows {rows}: replays differ in kernel count {sorted(counts)}")
        sums = sorted((summary(r) for r in reps), key=lambda s: s["span_us"])
        med = sums[len(sums) // 2]
        r = dict(preset=None if args.checkpoint else args.preset, ctx=args.ctx, rows=rows,
                 replays=args.replays, gpu=torch.cuda.get_device_name(),
                 span_us_median=med["span_us"],
                 span_us_min=sums[0]["span_us"], busy_us=med["busy_us"], gaps_us=med["gaps_us"],
                 kernels=med["kernels"], timeline=med["timeline"], plan=d.plan)
        results.append(r)
        md.append(f"\n### {args.preset} rows {rows}: {med['kernels']} kernels, span {med['span_us']:.1f} us, "
                  f"busy {med['busy_us']:.1f} us, gaps {med['gaps_us']:.1f} us (median of {args.replays} replays)\n")
        md.append("| # | kernel | start us | dur us | gap before us |\n|---|---|---|---|---|")
        for i, k in enumerate(med["timeline"]):
            md.append(f"| {i} | `{k['kernel']}` | {k['start_us']:.1f} | {k['dur_us']:.1f} | {k['gap_us']:.1f} |")
        del bound, d, b
        torch.cuda.empty_cache()

    print("\n".join(md))
    print(f"\n{torch.cuda.get_device_name()}, {args.preset}, ctx {args.ctx}")
    print("rows  kernels  span us  busy us  gaps us  gaps/kernel us")
    for r in results:
        print(f"{r['rows']:>4} {r['kernels']:>8} {r['span_us_median']:8.1f} {r['busy_us']:8.1f} "
              f"{r['gaps_us']:8.1f} {r['gaps_us'] / max(1, r['kernels'] - 1):14.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print("wrote", args.json)
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(md) + "\n")
        print("wrote", args.md)


if __name__ == "__main__":
    main()
