// The confidence head's eager CUDA kernel (ops/confidence.h, contract.md section 9),
// bit for bit cpu::confidence. Launch: one warp per (row, step) value, 4 per
// 128-thread block; the warp walks [h ; e] in the canonical order of core/reduce.h
// (lane l owns chunks l, l+32, ... of 8 inputs, one fma per term) and combines the
// lanes with the xor butterfly, then adds the bias and applies sigmoid_f32
// (core/confidence.h). Checks its arguments before the launch, never synchronizes
// or allocates: capturable in a CUDA graph. Token ids behind device pointers are
// not read on the host (the API boundary and the Markov loop make them valid).
#pragma once

#include <cuda_runtime.h>

#include "sparkdraft/ops/confidence.h"

namespace sparkdraft::cuda {

void confidence(const ops::ConfidenceParams& p, cudaStream_t stream);

}  // namespace sparkdraft::cuda
