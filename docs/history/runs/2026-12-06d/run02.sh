#!/usr/bin/env bash
# 2026-12-06d run 2 (sitting 18). Builds (docs/CONTRIBUTING.md "Binaries carried to the GPU"):
#   Y1 = run 1's Y1, the code of main at 78d1ba2 (sparkdraft only);
#   T  = Y1 + the attention pieces halved where a request's tokens span more than one row tile
#        and would split the context (sparkdraft and sparkdraft_cuda_tests): at 8 requests
#        qwen3-8b 2 pieces a request with 2 splits instead of 1 with 4, muse 2 pieces and no
#        split instead of 1 with 2; at one request 2 pieces and half the splits.
# T's whole GPU suite (CudaAttention at every split, its split test on the new piece bound, the
# attention speed cases) and check, then the step Y1 T Y1 T: attention_chunk and
# attention_combine at 1 and 8 requests in the timeline.
set -u
bash tools/gpu_ab.sh run02 --builds "Y1 T" --suite T --steps "Y1 T Y1 T"
