#!/usr/bin/env bash
# 2026-12-04c run 2: run01.sh again on a clean rebuild of the same commit (run 1's fused
# Markov loop object was stale: gpu-log 2026-12-04c).
RUN=run02 exec bash "$(dirname "$0")/run01.sh"
