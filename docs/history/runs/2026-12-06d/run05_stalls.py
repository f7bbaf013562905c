#!/usr/bin/env python3
"""Stall samples of run 5's ncu source pages (k1: gemm_wg_kernel<2, 128, false, true, 2>, o_proj at
224 tokens; k2: gemm_wg_kernel<1, 224, false, false, 1>, qkv at 224 tokens): the stall reasons over
the kernel, the hottest instructions with the ones before them, and the samples by how often an
instruction ran (a proxy for the code region: the main loop's instructions run once a warp and
stage). Usage: run05_stalls.py DIR (the unpacked run05_logs.tar.xz's logs/)."""
import os
import sys

# The tables are tools/ncu_stalls.py's (this script ran before the tool existed; its output
# run05_stalls.txt is the same).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tools"))
from ncu_stalls import report  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else "logs"
report("k1 gemm_wg_kernel<2, 128, false, true, 2> (o_proj, 224 tokens)", f"{d}/k1_sass.csv", counts=4)
report("k2 gemm_wg_kernel<1, 224, false, false, 1> (qkv, 224 tokens)", f"{d}/k2_sass.csv", counts=4)
