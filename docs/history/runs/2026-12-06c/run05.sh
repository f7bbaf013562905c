#!/usr/bin/env bash
# 2026-12-06c run 5: Rs = main 26116ce (run 3's R; sparkdraft only); S = Rs + the plain residual
# boundary at 4097 to 8192 values a row on four chunks a thread of 256 threads (two blocks an SM
# instead of one of 512) with the largest shared-memory carve-out (run 4's profile: muse's
# boundary at 224 rows ran 1.7 waves of one block an SM) + its test at hidden 8192. S's
# boundary, peer-reduce and TP tests and check, then the step Rs S once each (a machine start
# had failed: 255 s of device time left).
set -u
bash tools/gpu_ab.sh run05 --builds "Rs S" --suite S --filter 'CudaResidualBoundary.*:PeerReduce.*:CudaTp.*' --steps "Rs S"
