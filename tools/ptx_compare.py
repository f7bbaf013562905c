#!/usr/bin/env python3
"""Kernel by kernel: does a change leave the device code of a .cu file as it was?

  tools/ptx_of.sh src/cuda/gemm/gemm.cu /tmp/new.ptx            # this tree
  tools/ptx_of.sh src/cuda/gemm/gemm.cu /tmp/old.ptx /tmp/old   # another checkout
  tools/ptx_compare.py /tmp/old.ptx /tmp/new.ptx [--diff] [--strip-arg Li1E]

For a change that cannot be run on a GPU here: every kernel whose PTX is the same
behaves the same. Compares each .entry's body with line info, comments, branch
labels, asm %= labels and local depot numbers normalized; --strip-arg removes a
mangled template argument from the new names (a defaulted template parameter
added to a kernel). Prints same / DIFF / only-old / only-new per kernel; exit 1
when any kernel of the old file differs or is missing, or when the old file has no
kernel at all (a comparison of nothing proves nothing). The PTX may also come from
built objects: `cuobjdump -ptx build/CMakeFiles/.../x.cu.o` (cuobjdump ships with
the CUDA toolkit and with Triton).
"""
import difflib
import re
import sys


def kernels(path, strip_arg=None):
    lines = open(path).read().split("\n")
    out, i = {}, 0
    while i < len(lines):
        # .visible / .weak kernels, and kernels of an anonymous namespace (no
        # visibility; their names carry a per-file hash, normalized below).
        m = re.match(r"(?:\.(?:visible|weak) )?\.entry (\S+)\(", lines[i])
        if not m:
            i += 1
            continue
        name, body, depth, started = m.group(1), [], 0, False
        while i < len(lines):
            line = lines[i]
            s = line.strip()
            if not (s.startswith(".loc") or s.startswith("//") or ".file" in s):
                body.append(line)
            depth += line.count("{") - line.count("}")
            started = started or "{" in line
            i += 1
            if started and depth == 0:
                break
        norm = name.replace(strip_arg + "EE", "EE") if strip_arg else name
        norm = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+", "_GLOBAL__N_", norm)
        text = "\n".join(body).replace(name, norm)
        text = re.sub(r"__local_depot\d+", "__local_depot", text)
        text = re.sub(r"\$L__BB\d+_", "$L__BB_", text)
        text = re.sub(r"\b([A-Z][A-Z_]*?)_\d+\b", r"\1_", text)  # asm %= labels (WAIT_3)
        out[norm] = text
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) < 2 or "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        sys.exit(0 if "--help" in sys.argv or "-h" in sys.argv else 2)
    strip = None
    if "--strip-arg" in sys.argv:
        strip = sys.argv[sys.argv.index("--strip-arg") + 1]
        args = [a for a in args if a != strip]
    old, new = kernels(args[0]), kernels(args[1], strip)
    if not old:
        print("no kernel found in", args[0])
        sys.exit(1)
    bad = 0
    for k, body in old.items():
        if k not in new:
            print("only-old", k)
            bad += 1
        elif body == new[k]:
            print("same    ", k)
        else:
            print("DIFF    ", k)
            bad += 1
            if "--diff" in sys.argv:
                for d in list(difflib.unified_diff(body.split("\n"), new[k].split("\n"),
                                                   lineterm=""))[:40]:
                    print("   ", d)
    for k in new:
        if k not in old:
            print("only-new", k)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
