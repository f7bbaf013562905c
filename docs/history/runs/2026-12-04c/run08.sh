#!/usr/bin/env bash
# 2026-12-04c run 8: run01.sh (every GPU test but the big presets, check on every tiny preset) on
# the final tree (plan's CUDA refusals, the top-k loop's wide -inf fill, the device-step test helper).
RUN=run08 exec bash "$(dirname "$0")/run01.sh"
