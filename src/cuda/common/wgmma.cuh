// wgmma (sm_90a) for the device probe of wgmma against the tensor-core twin
// (tests/cuda/test_wgmma.cu, docs/mma-twin.md). contract.md section 3: a kernel of the
// contract may use wgmma only where that probe shows it gives the bits of the
// m16n8k16 chain on the device (docs/mma-twin.md; the probe's shapes: every form below);
// the GEMM's wg variants (gemm/wg_tile.cuh) run m64n64k16, m64n128k16 and the wide tile's
// m64n{160,192,224,256}k16, and cuda::wgmma_self_test checks each of them on every device
// before use.
//
// Layouts (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
// - The warpgroup is 4 consecutive warps (128 threads, the first warp's index a
//   multiple of 4); warp w = (threadIdx.x / 32) % 4 holds rows 16w .. 16w+15 of D.
// - Accumulator m64nN f32, N/2 registers per thread (lane = 4 * g + t), for every
//   8-column block j < N/8:
//     d[4j + 0] = D[16w + g][8j + 2t]      d[4j + 1] = D[16w + g][8j + 2t + 1]
//     d[4j + 2] = D[16w + g + 8][8j + 2t]  d[4j + 3] = D[16w + g + 8][8j + 2t + 1]
//   i.e. mma.m16n8k16's C fragment of the warp's 16 rows, once per 8 columns.
// - A from registers (the _rs forms): a[0..3] = mma.m16n8k16's A fragment of the
//   warp's 16 rows (common/mma.cuh).
// - A and B from shared memory (the _ss forms; B is N x 16 with k contiguous, like
//   mma's "col" B): K-major, no swizzle. The operand is cut into core matrices of
//   8 rows x 8 bf16 (16 bytes per row), each 128 contiguous bytes (row r at byte
//   16 r); the descriptor (wgmma_desc) gives the first core matrix's address, LBO =
//   the byte distance between core matrices adjacent in K, SBO = between core
//   matrices adjacent in M (or N).
// Every wgmma is asynchronous: wgmma_fence() after the accumulator registers (and a
// register A) were written and before the first wgmma; shared memory written by
// ordinary stores needs fence_proxy_async() and a barrier before a wgmma reads it;
// wgmma_commit() then wgmma_wait<0>() before D is read.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SD_HAVE_WGMMA 1
#else
#define SD_HAVE_WGMMA 0
#endif

namespace sparkdraft::cuda {

// Whether this compilation has wgmma (sm_90a); a device function (false on the host).
__host__ __device__ constexpr bool wgmma_compiled() { return SD_HAVE_WGMMA != 0; }

// A shared-memory matrix descriptor, no swizzle (layout type 0), base offset 0.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr >> 4) & 0x3fffu) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3fffu) << 32);
}

__device__ __forceinline__ void wgmma_fence() {
#if SD_HAVE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if SD_HAVE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N committed wgmma groups of this warpgroup are in flight
// (N = 0: all done; the accumulators may then be read).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if SD_HAVE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Orders this thread's ordinary shared-memory stores before later async-proxy
// (wgmma, bulk copy) reads of them.
__device__ __forceinline__ void fence_proxy_async() {
#if SD_HAVE_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The no-swizzle K-major layout of cuda::wgmma_self_test's tiles: rows of 64 k (8 chunks of 16
// bytes); chunk c of row r at byte
// ((r / 8) * 8 + c) * 128 + (r % 8) * 16, so each 8-row x 16-byte core matrix is
// 128 contiguous bytes, LBO (next core matrix in K) = 128, SBO (next 8 rows) = 1024.
inline constexpr uint32_t kWgmmaLbo = 128, kWgmmaSbo = 1024;
__host__ __device__ constexpr uint32_t wgmma_core_offset(int r, int c) {
  return static_cast<uint32_t>((((r >> 3) << 3) + c) * 128 + (r & 7) * 16);
}

// Pins n accumulator registers in place around a run of wgmmas (an empty asm that
// reads and writes each), so that the compiler moves none of them while a wgmma is
// in flight (it would serialize the wgmmas, ptxas C7514).
template <int n>
__device__ __forceinline__ void wgmma_fence_operands(float (&r)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// A shared-memory matrix descriptor for the 128-byte swizzle, K-major (layout type
// 1): rows of 128 bytes (64 bf16 of k) whose 16-byte chunk c sits at chunk
// c ^ (row % 8), 8-row atoms of 1024 bytes (SBO), every atom 1024-byte aligned
// (base offset 0); the layout the TMA writes with CU_TENSOR_MAP_SWIZZLE_128B. The
// k16 step h of a row block starts 32 h bytes into it.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr >> 4) & 0x3fffu) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// The wgmma.mma_async forms the kernels and the probe issue, all bf16 x bf16 -> f32
// with D += A * B (scale-d 1), not yet committed:
//   wgmma_m64n{8,64,128,160,192,224,256}k16_ss(d, desc_a, desc_b)  A and B from shared memory
//   wgmma_m64n{8,64,256}k16_rs(d, a, desc_b)       A from registers (mma.m16n8k16's A
//                                                    fragment of the warp's 16 rows)
// d: the N/2 accumulator registers of the layout above. One macro writes each form:
// OPS names the operands after the accumulators, PRED the scale-d operand, DLIST the
// accumulators ("+f"(d[i]), SD_WGMMA_D*) and REGS their "{%0, ...}" (SD_WGMMA_R*).
#define SD_WGMMA_D4(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3])
#define SD_WGMMA_D32(b)                                                        \
  SD_WGMMA_D4(b), SD_WGMMA_D4(b + 4), SD_WGMMA_D4(b + 8), SD_WGMMA_D4(b + 12), \
      SD_WGMMA_D4(b + 16), SD_WGMMA_D4(b + 20), SD_WGMMA_D4(b + 24), SD_WGMMA_D4(b + 28)
#define SD_WGMMA_D128 SD_WGMMA_D32(0), SD_WGMMA_D32(32), SD_WGMMA_D32(64), SD_WGMMA_D32(96)
#define SD_WGMMA_R4 "{%0, %1, %2, %3}"
#define SD_WGMMA_R32                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define SD_WGMMA_R128                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "  \
  "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "  \
  "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, "    \
  "%103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "   \
  "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define SD_WGMMA_D64 SD_WGMMA_D32(0), SD_WGMMA_D32(32)
#define SD_WGMMA_R64                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "  \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "  \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define SD_WGMMA_D80                                                                    \
  SD_WGMMA_D32(0), SD_WGMMA_D32(32), SD_WGMMA_D4(64), SD_WGMMA_D4(68), SD_WGMMA_D4(72), \
      SD_WGMMA_D4(76)
#define SD_WGMMA_R80                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "  \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "  \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, "  \
  "%66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}"
#define SD_WGMMA_D96 SD_WGMMA_D32(0), SD_WGMMA_D32(32), SD_WGMMA_D32(64)
#define SD_WGMMA_R96                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "  \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "  \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, "  \
  "%66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "  \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define SD_WGMMA_D112                                                                     \
  SD_WGMMA_D32(0), SD_WGMMA_D32(32), SD_WGMMA_D32(64), SD_WGMMA_D4(96), SD_WGMMA_D4(100), \
      SD_WGMMA_D4(104), SD_WGMMA_D4(108)
#define SD_WGMMA_R112                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "  \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "  \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, "  \
  "%66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "  \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, "  \
  "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111}"
#define SD_WGMMA_ASM(N, REGS, OPS, PRED, TAIL)                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " PRED                                                   \
  ", 0;\n"                                                                                   \
  "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " REGS ", " OPS ", p, 1, 1" TAIL \
  ";\n}\n"

#if SD_HAVE_WGMMA
#define SD_WGMMA_SS(N, REGS, OPS, PRED, ...)                                       \
  __device__ __forceinline__ void wgmma_m64n##N##k16_ss(float* d, uint64_t desc_a, \
                                                        uint64_t desc_b) {         \
    asm volatile(SD_WGMMA_ASM(N, REGS, OPS, PRED, ", 0, 0")                        \
                 : __VA_ARGS__                                                     \
                 : "l"(desc_a), "l"(desc_b), "r"(1)                                \
                 : "memory");                                                      \
  }
#define SD_WGMMA_RS(N, REGS, OPS, PRED, ...)                                           \
  __device__ __forceinline__ void wgmma_m64n##N##k16_rs(float* d, const uint32_t a[4], \
                                                        uint64_t desc_b) {             \
    asm volatile(SD_WGMMA_ASM(N, REGS, OPS, PRED, ", 0")                               \
                 : __VA_ARGS__                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)     \
                 : "memory");                                                          \
  }
#else
#define SD_WGMMA_SS(N, REGS, OPS, PRED, ...)                                       \
  __device__ __forceinline__ void wgmma_m64n##N##k16_ss(float* d, uint64_t desc_a, \
                                                        uint64_t desc_b) {         \
    (void)d, (void)desc_a, (void)desc_b;                                           \
    __trap();                                                                      \
  }
#define SD_WGMMA_RS(N, REGS, OPS, PRED, ...)                                           \
  __device__ __forceinline__ void wgmma_m64n##N##k16_rs(float* d, const uint32_t a[4], \
                                                        uint64_t desc_b) {             \
    (void)d, (void)a, (void)desc_b;                                                    \
    __trap();                                                                          \
  }
#endif

SD_WGMMA_SS(8, SD_WGMMA_R4, "%4, %5", "%6", SD_WGMMA_D4(0))
SD_WGMMA_RS(8, SD_WGMMA_R4, "{%4, %5, %6, %7}, %8", "%9", SD_WGMMA_D4(0))
SD_WGMMA_SS(64, SD_WGMMA_R32, "%32, %33", "%34", SD_WGMMA_D32(0))
SD_WGMMA_RS(64, SD_WGMMA_R32, "{%32, %33, %34, %35}, %36", "%37", SD_WGMMA_D32(0))
SD_WGMMA_SS(128, SD_WGMMA_R64, "%64, %65", "%66", SD_WGMMA_D64)
SD_WGMMA_SS(160, SD_WGMMA_R80, "%80, %81", "%82", SD_WGMMA_D80)
SD_WGMMA_SS(192, SD_WGMMA_R96, "%96, %97", "%98", SD_WGMMA_D96)
SD_WGMMA_SS(224, SD_WGMMA_R112, "%112, %113", "%114", SD_WGMMA_D112)
SD_WGMMA_SS(256, SD_WGMMA_R128, "%128, %129", "%130", SD_WGMMA_D128)
SD_WGMMA_RS(256, SD_WGMMA_R128, "{%128, %129, %130, %131}, %132", "%133", SD_WGMMA_D128)

#undef SD_WGMMA_SS
#undef SD_WGMMA_RS
#undef SD_WGMMA_ASM

}  // namespace sparkdraft::cuda
