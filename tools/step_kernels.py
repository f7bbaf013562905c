#!/usr/bin/env python3
"""Where a draft step spends its time, from `sparkdraft bench step --timeline --json FILE`.

For every (preset, rows) record of each file, the kernels of its fused_timeline (one replay
of the step's CUDA graph) are summed by family: the kernel name up to its template arguments
(`gemm_detail::gemm_wg_kernel<1, 1, false, false>` is `gemm_wg_kernel`), or, with --match,
the kernels whose name contains each given string. Several files (runs of the same shapes,
e.g. two builds measured in one machine session) print side by side:

  python3 tools/step_kernels.py base.json new.json --match attention_chunk attention_combine
  python3 tools/step_kernels.py run05_bench_step.json --top 6
  python3 tools/step_kernels.py pdl_off.json pdl_on.json --adds

--adds sums, instead of each kernel's duration, the time it adds to the step: its end minus the
latest end of the kernels before it. Under `--step-pdl on` a kernel becomes resident while the
one before it runs and waits, so its duration includes that wait; what it adds does not.

Prints a table (count x kernels, microseconds summed) per record; exits 2 on a file that is
not bench step JSON with a timeline.
"""

import argparse
import json
import sys
from collections import OrderedDict


def family(name):
    """`ns::kernel<args>(...)` -> `kernel`."""
    return name.split("<")[0].split("(")[0].split("::")[-1]


def sums(timeline, match=None, adds=False):
    """OrderedDict key -> [count, microseconds]: by --match strings in their order, else by
    family in order of first appearance; the kernels' durations, or with `adds` the time each
    adds to the step (its end minus the latest end before it, at least 0)."""
    out = OrderedDict()
    if match:
        for key in match:
            out[key] = [0, 0.0]
    last_end = 0.0
    for k in timeline:
        us = k["duration_us"]
        if adds:
            end = k["start_us"] + k["duration_us"]
            us = max(0.0, end - last_end)
            last_end = max(last_end, end)
        keys = [m for m in match if m in k["name"]] if match else [family(k["name"])]
        for key in keys:
            acc = out.setdefault(key, [0, 0.0])
            acc[0] += 1
            acc[1] += us
    return out


def load(path):
    try:
        with open(path) as f:
            records = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"step_kernels: {path}: {e}") from e
    if not isinstance(records, list) or not all(
            isinstance(r, dict) and "fused_timeline" in r for r in records):
        print(f"step_kernels: {path}: not `bench step --timeline --json` output "
              "(a list of records with fused_timeline)", file=sys.stderr)
        sys.exit(2)
    return records


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="bench step --timeline --json files")
    ap.add_argument("--match", nargs="+", help="sum the kernels whose name contains each string")
    ap.add_argument("--top", type=int, default=0,
                    help="by family: only the N largest families (0: all)")
    ap.add_argument("--adds", action="store_true",
                    help="the time each kernel adds to the step (its end minus the latest end "
                    "before it), not its duration: for --step-pdl on, where kernels start early")
    args = ap.parse_args(argv)
    runs = [(path, load(path)) for path in args.files]
    shapes = [(r.get("preset"), r.get("rows")) for r in runs[0][1]]
    for preset, rows in shapes:
        print(f"{preset} rows {rows}:")
        per_file = []
        for path, records in runs:
            rec = next((r for r in records if (r.get("preset"), r.get("rows")) == (preset, rows)),
                       None)
            per_file.append(
                sums(rec["fused_timeline"]["timeline"], args.match, args.adds) if rec else None)
        keys = list(OrderedDict.fromkeys(k for s in per_file if s for k in s))
        if not args.match and args.top > 0:
            first = next(s for s in per_file if s)
            keys.sort(key=lambda k: -first.get(k, [0, 0.0])[1])
            keys = keys[:args.top]
        for key in keys:
            cells = []
            for s in per_file:
                c, us = (s or {}).get(key, [0, 0.0])
                cells.append(f"{c:3d} x {us:9.1f}")
            print(f"  {key:32s} " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
