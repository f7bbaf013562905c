// The tensor-core instruction on this device against its twin (core/mma.h).
//
// mma_probe runs cases of one family (core/mma_probe.h) through
// mma.sync.m16n8k16 on the current device and compares every output with the
// twin. mma_self_test runs a small sample of every family once per device and
// process (well under 100 ms) and throws DeviceError when the device and the twin
// differ anywhere: the GPU backend refuses to run on such a device, since no
// product it computed could be reproduced on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sparkdraft/core/mma_probe.h"

namespace sparkdraft::cuda {

struct MmaProbeResult {
  int64_t outputs = 0;
  int64_t mismatches = 0;
  std::string first;  // the first mismatch: case, element, inputs, device and twin bits
};

// Cases [first, first + count) of `dist` under `seed`. device_bits, when given,
// receives the device's d bits, 128 per case in case order ([m][n] within a case).
MmaProbeResult mma_probe(MmaDist dist, uint64_t seed, int64_t first, int64_t count,
                         std::vector<uint32_t>* device_bits = nullptr);

// Throws DeviceError naming the family and the first differing element.
void mma_self_test();

// Whether this device may run the GEMM's wg variants (wgmma.m64nNk16 for N 64, 160, 192,
// 224 and 256, contract.md section 3): an sm_90 device, a build with sm_90a code, and every
// form equal to the twin on two tiles of every probe family (core/mma_probe.h; N / 8 cases a 64 x N
// tile), run once per device and process. When
// not, `why` says which, and cuda::gemm runs the mma.sync variants (the same bits).
struct WgmmaStatus {
  bool usable = false;
  std::string why;
};
const WgmmaStatus& wgmma_self_test();

}  // namespace sparkdraft::cuda
