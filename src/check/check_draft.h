// `sparkdraft check`: the exactness contract of contract.md section 3 on one
// checkpoint and scenario, with a readable report.
//
//   cpu             the CPU backend: every op its own, the matrix products on the
//                   tensor-core twin (nothing borrowed from the GPU);
//   gpu eager       the CUDA backend, eager Markov loop, no graph;
//   gpu fused       the CUDA backend, fused Markov loop, CUDA graph.
// CPU == GPU eager and GPU eager == GPU fused must hold bit for bit on draft
// tokens, the draft-logits cache and every layer's KV cache, every round (the
// comparisons and the report: sparkdraft/check.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sparkdraft/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft::cuda {

// `fused`: the fused side's options (`check --step-pdl on`: CudaDraftOptions::step_pdl); the
// eager side runs without programmatic dependent launch.
CheckReport check_draft(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s,
                        const CudaDraftOptions& fused = CudaDraftOptions{});

// `sparkdraft check --tp N`: the GPU backend at TP tp_size (make_cuda_backend on
// `devices`: one GPU a rank over NCCL, or every rank sharing one GPU) against the
// GPU backend at TP 1, both with the fused Markov loop: every round's tokens and
// cache, every layer's KV cache (TP 1 layout), and every rank's final hidden states
// of the last round, bit for bit. `reduce`: how the TP ranks complete o_proj's and
// down's all-reduce (CudaDraftOptions::tp_reduce; the report's mode says which ran).
// InvalidArgument for tp_size < 2.
CheckReport check_tp(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s, int tp_size,
                     const std::vector<int>& devices, TpReduce reduce = TpReduce::automatic);

}  // namespace sparkdraft::cuda
