#!/usr/bin/env python3
"""Holds every library kernel to programmatic dependent launch's rule (common/ptx.cuh,
pdl_enter; common/launch.h, PdlScope): the draft step launches all its kernels with the
attribute, so a kernel must wait for its predecessor before it touches memory. Each
__global__ function under src/cuda must begin with `pdl_enter();`, or be listed below with
the call it makes later in its body instead, or as never launched in a step.

  python3 tools/check_pdl.py [ROOT]     (default: src/cuda next to this script)

Exit 0 when every kernel complies; 1 with one line per kernel that does not.
"""
import pathlib
import re
import sys

# kernel -> (why it needs no pdl_enter() first, the call its body must still make; None for
# a kernel never launched in a step)
WEIGHTS_FIRST = "requests its first stages' weight rows (constant during a step), then pdl_enter()"
EXEMPT = {
    "fused_step_kernel": ("waits in its body (griddepcontrol.wait after the w2 ring prologue)",
                          "grid_dependency_wait()"),
    "gemm_ring_kernel": (WEIGHTS_FIRST, "pdl_enter()"),
    "gemm_bulk_kernel": (WEIGHTS_FIRST, "pdl_enter()"),
    "gemm_wg_kernel": (WEIGHTS_FIRST, "pdl_enter()"),
    "fast_math_check_kernel": ("a self-test, launched by tests only", None),
    "mma_probe_kernel": ("the tensor-core probe, launched before any step", None),
    "wgmma_probe_kernel": ("the wgmma probe, launched before any step", None),
    "wgmma_compiled_kernel": ("the wgmma probe, launched before any step", None),
}

# The launch bounds may hold one level of parentheses: __launch_bounds__(32 * (WG + 1)).
KERNEL = re.compile(
    r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(", re.S)


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


def body_end(text, start):
    """The index of the `}` that closes the body opened just before start."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


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
                why, call = EXEMPT[name]
                if call is not None and call not in text[start:body_end(text, start)]:
                    bad.append(f"{path}: {name}: exempt ({why}), but its body never calls {call}")
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
