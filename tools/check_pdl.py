#!/usr/bin/env python3
"""Holds every library kernel to programmatic dependent launch's rule (common/ptx.cuh,
pdl_enter; common/launch.h, PdlScope): the draft step launches all its kernels with the
attribute, so a kernel must wait for its predecessor before it touches memory. Each
__global__ function under src/cuda must begin with `pdl_enter();`, or be listed below with
the place where it waits instead, or as never launched in a step.

  python3 tools/check_pdl.py [ROOT]     (default: src/cuda next to this script)

Exit 0 when every kernel complies; 1 with one line per kernel that does not.
"""
import pathlib
import re
import sys

# kernel -> why it needs no pdl_enter() first
EXEMPT = {
    "fused_step_kernel": "waits in its body (griddepcontrol.wait after the w2 ring prologue)",
    "fast_math_check_kernel": "a self-test, launched by tests only",
    "mma_probe_kernel": "the tensor-core probe, launched before any step",
    "wgmma_probe_kernel": "the wgmma probe, launched before any step",
    "wgmma_compiled_kernel": "the wgmma probe, launched before any step",
}

KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(", re.S)


def body_start(text, pos):
    """The index after the `{` that opens the function whose parameter list starts at pos."""
    depth = 0
    for i in range(pos, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "{" and depth == 0:
            return i + 1
        elif c == ";" and depth == 0:
            return None  # a declaration
    return None


def check(root):
    bad, seen = [], 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".cu", ".cuh", ".h"):
            continue
        text = path.read_text()
        for m in KERNEL.finditer(text):
            name = m.group(1)
            start = body_start(text, m.end() - 1)
            if start is None:
                continue
            seen += 1
            if name in EXEMPT:
                if name == "fused_step_kernel" and "grid_dependency_wait()" not in text[start:]:
                    bad.append(f"{path}: {name}: exempt for waiting in its body, but never waits")
                continue
            first = text[start:].lstrip()
            if not first.startswith("pdl_enter();"):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{path}:{line}: kernel {name} does not begin with pdl_enter();")
    return seen, bad


def main():
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else \
        pathlib.Path(__file__).resolve().parent.parent / "src" / "cuda"
    seen, bad = check(root)
    if seen == 0:
        print(f"check_pdl: no kernels found under {root}", file=sys.stderr)
        return 1
    for b in bad:
        print(b)
    print(f"check_pdl: {seen} kernels, {len(bad)} without pdl_enter() first", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
