// Host/device qualifiers for the numerics core: every header under core/ compiles
// unchanged in g++ and nvcc, so the CPU reference and the kernels share one definition.
#pragma once

#if defined(__CUDACC__)
#define SD_HD __host__ __device__ __forceinline__
#else
#define SD_HD inline
#endif

#if defined(__CUDA_ARCH__)
#define SD_ON_DEVICE 1
#else
#define SD_ON_DEVICE 0
#endif
