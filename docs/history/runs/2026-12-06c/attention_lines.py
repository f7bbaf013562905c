#!/usr/bin/env python3
"""Attention's executed instructions by source line (2026-12-06c, no GPU run).

2026-12-06a run 1's ncu source page (`run01b_logs.tar.xz`: logs/attention_chunk_32_sass.csv, one
attention_chunk_kernel<8, 4, 0> launch at 32 requests of qwen3-8b) has executed instructions
per SASS address but no source lines. This script matches its addresses (offset from the
kernel's first) to the SASS of a local build of the same attention.cu code, disassembled with
line info, checks the opcodes agree, and sums the executed instructions per source line.

  cuobjdump -xelf all build/CMakeFiles/sparkdraft_cuda.dir/src/cuda/eager/attention.cu.o
  nvdisasm -c -g attention.sm_90a.cubin > att.sass    # (pip nvidia-cuda-{cuobjdump,nvdisasm})
  python3 attention_lines.py sass.csv att.sass
"""
import collections
import csv
import re
import sys

KERNEL = "attention_chunk_kernelILi8ELi4ELb0"


def opcode(text):
    t = text.strip().split()
    if t and t[0].startswith("@"):
        t = t[1:]
    return t[0].split(".")[0] if t else ""


def main(csv_path, sass_path):
    rows = list(csv.reader(open(csv_path)))
    hdr, data = rows[1], rows[2:]
    ia, isrc = hdr.index("Address"), hdr.index("Source")
    iex = hdr.index("Instructions Executed")
    ist = hdr.index("Warp Stall Sampling (All Samples)")
    base = int(data[0][ia], 16)
    amap, cur, inside = {}, None, False
    for line in open(sass_path):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            inside = KERNEL in m.group(1)
            continue
        if not inside:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            cur = (m.group(1).split("/")[-1], int(m.group(2)))
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            amap[int(m.group(1), 16)] = (cur, m.group(2))
    total, agree = 0.0, 0
    by_line, stalls, by_op = collections.Counter(), collections.Counter(), collections.Counter()
    for r in data:
        ex = float(r[iex].replace(",", "") or 0)
        st = float(r[ist].replace(",", "") or 0)
        total += ex
        by_op[opcode(r[isrc])] += ex
        hit = amap.get(int(r[ia], 16) - base)
        if hit:
            agree += opcode(hit[1]) == opcode(r[isrc])
            by_line[hit[0]] += ex
            stalls[hit[0]] += st
    print(f"{len(data)} SASS instructions, {agree} with the same opcode here; "
          f"{total:.0f} executed warp instructions")
    for k, v in by_line.most_common(40):
        print(f"{v:10.0f} {100 * v / total:5.1f}%  stall samples {stalls[k]:6.0f}  {k[0]}:{k[1]}")
    files = collections.Counter()
    for k, v in by_line.items():
        files[k[0]] += v
    print("by file:", ", ".join(f"{f} {100 * v / total:.1f}%" for f, v in files.most_common(8)))
    print("by opcode:", ", ".join(f"{o} {100 * v / total:.1f}%" for o, v in by_op.most_common(16)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
