// The one tensor-core instruction of the contract (contract.md section 3) and its
// fragment layouts, for every kernel that computes a matrix product:
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   d = a * b + c
// core/mma.h is its bit-exact CPU twin.
//
// Fragments (lane = 4 * g + t, g = lane / 4, t = lane % 4; two bf16 per 32-bit
// register, the lower k in the low half):
//   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//   a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]       (B column g, k contiguous)
//   c[0] = C[g][2t]  c[1] = C[g][2t+1]  c[2] = C[g+8][2t]  c[3] = C[g+8][2t+1]
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sparkdraft::cuda {

__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                               const float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  (void)a, (void)b;
  d[0] = c[0], d[1] = c[1], d[2] = c[2], d[3] = c[3];
  __trap();
#endif
}

// Four 8x8 b16 matrices from shared memory (lane l gives the address of row l % 8
// of matrix l / 8); register i holds matrix i in the mma fragment layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// The same from a 32-bit shared-memory address (common/ptx.cuh smem_u32).
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}

// The same four matrices transposed: register i holds the transpose of matrix i
// (for a B operand stored k-major: rows = k, columns = n).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// Two 8x8 b16 matrices (lanes 0..15 give the row addresses: rows l % 8 of matrix
// l / 8; the other lanes' addresses are ignored), plain and transposed.
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_row));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* smem_row) {
  ldmatrix_x2(r, static_cast<uint32_t>(__cvta_generic_to_shared(smem_row)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t r[2], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(s));
}

}  // namespace sparkdraft::cuda
