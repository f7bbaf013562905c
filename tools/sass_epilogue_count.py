#!/usr/bin/env python3
"""Counts the SASS instructions of the fused Markov step's per-entry path.

  tools/sass_epilogue_count.py SASS_FILE LO HI [K] [--fast]

SASS_FILE: `nvdisasm -g -c` of the fused step's cubin (cuobjdump -xelf all launch.cu.o,
then nvdisasm -g -c launch.sm_90a.cubin). LO..HI: the lines of launch.cu that hold the
epilogue's noised pass (the loop over the kEpl entries). For the fused_step_kernel<K, kEpl>
instantiations (K default 256) it prints, per kEpl, the instructions attributed (by the
line info) to philox.h, to the epilogue's helpers (epilogue.cuh, tile.h: the logits'
loads and stores, the bracket, the queue), to the step logit (device.cuh, bf16.h) and to launch.cu
lines LO..HI, and the per-entry figure (kEpl 8 minus kEpl 1, over 7): the kEpl entries of
a slot are unrolled, so the difference is 7 entries' worth of the per-entry path.
--fast: only the code up to the kernel's last EXIT, i.e. without the copies the compiler
appends for each warp shuffle and vote run by a diverged warp (WARPSYNC.COLLECTIVE
blocks, never run here: the epilogue's shuffles are all converged).
"""
import re
import sys


def fast_path(lines):
    """The lines up to the last EXIT before the first diverged-warp copy."""
    first = next((k for k, s in enumerate(lines) if "WARPSYNC.COLLECTIVE" in s), len(lines))
    exits = [k for k, s in enumerate(lines[:first]) if re.search(r"\bEXIT\b", s)
             and "PREEXIT" not in s]
    return lines[: exits[-1] + 1] if exits else lines


def counts(lines, lo, hi):
    c = {"philox": 0, "bracket": 0, "logit": 0, "pass": 0, "total": 0}
    f, ln = "", 0
    for s in lines:
        m = re.search(r'//## File "([^"]+)", line (\d+)', s)
        if m:
            f, ln = m.group(1), int(m.group(2))
            continue
        if not re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+\S", s):
            continue
        c["total"] += 1
        if f.endswith("core/philox.h"):
            c["philox"] += 1
        elif f.endswith("fused/epilogue.cuh") or f.endswith("markov/tile.h"):
            c["bracket"] += 1
        elif f.endswith("markov/device.cuh") or f.endswith("core/bf16.h"):
            c["logit"] += 1
        elif f.endswith("fused/launch.cu") and lo <= ln <= hi:
            c["pass"] += 1
    return c


def main():
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return
    fast = "--fast" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--fast"]
    if len(args) not in (3, 4) or not all(a.isdigit() for a in args[1:]):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    path, lo, hi = args[0], int(args[1]), int(args[2])
    k = args[3] if len(args) > 3 else "256"
    try:
        text = open(path).read().split("\n")
    except OSError as e:
        print(f"sass_epilogue_count.py: {e}", file=sys.stderr)
        sys.exit(2)
    starts = [i for i, s in enumerate(text) if s.startswith(".text.")]
    res = {}
    for j, i in enumerate(starts):
        m = re.search(r"fused_step_kernelILi(\d+)ELi(\d+)E", text[i])
        if not m or m.group(1) != k:
            continue
        end = starts[j + 1] if j + 1 < len(starts) else len(text)
        body = text[i:end]
        res[int(m.group(2))] = counts(fast_path(body) if fast else body, lo, hi)
    for e in sorted(res):
        print(f"K {k} kEpl {e}: {res[e]}")
    if 8 in res and 1 in res:
        per = {x: (res[8][x] - res[1][x]) / 7 for x in ("philox", "bracket", "logit", "pass")}
        print(f"per entry (kEpl 8 - kEpl 1) / 7: {per}, sum {sum(per.values()):.1f}")


main()
