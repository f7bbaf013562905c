// The PTX every hand-written kernel shares (the tensor-core instruction and its
// ldmatrix loads live next door in common/mma.cuh): asynchronous global -> shared
// copies and their groups, programmatic dependent launch, cache-hinted and volatile
// accesses, and the order key that lets atomicMax on int fold floats.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sparkdraft::cuda {

// ---- programmatic dependent launch (sm_90; no-ops below) ----------------------------
// Waits until the grids this one depends on have finished (their memory is visible).
// Everything before it may touch only data that no earlier kernel of the stream writes.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the dependent grid (launched with programmatic stream serialization) start.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The first statement of a library kernel (tests/lint: tools/check_pdl.py): waits for
// the grids before it in the stream, then lets the next kernel launch. Under a step's
// PdlScope (common/launch.h; CudaDraftOptions::step_pdl) every kernel is launched with programmatic
// dependent launch, so kernel k + 1's CTAs may become resident while kernel k runs, and wait here;
// the trigger after the wait keeps the chain transitive (kernel k + 2 launches only once every CTA
// of k + 1 is past its wait, hence k is complete). Launched without the attribute, both
// instructions are no-ops.
__device__ __forceinline__ void pdl_enter() {
  grid_dependency_wait();
  launch_dependents();
}

// ---- named barriers ---------------------------------------------------------------------
// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- cp.async -------------------------------------------------------------------------
// 16 bytes global -> shared, bypassing L1; src_bytes 0 fills zeros. `smem` in the shared
// window (smem_u32), so that a caller's constant offsets fold into the instruction, or
// a generic pointer to shared memory.
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  cp_async_16(static_cast<uint32_t>(__cvta_generic_to_shared(smem)), gmem, src_bytes);
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `pending` (0..2: rings of up to 4 stages) committed groups
// of this thread are in flight.
__device__ __forceinline__ void cp_async_wait(int pending) {
  if (pending <= 0)
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  else if (pending == 1)
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  else
    asm volatile("cp.async.wait_group 2;\n" ::: "memory");
}

// ---- bulk copies and mbarriers (sm_90) ---------------------------------------------
// A shared-memory address (the 32-bit form the shared-state-space PTX takes).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// An mbarrier of `count` arrivals per phase; then fence_mbarrier_init() and a CTA
// barrier before anyone (the bulk-copy unit included) uses it.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also expects `bytes` more of asynchronous transactions in the
// current phase (the phase ends when every arrival is in and the bytes landed).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
#endif
}

// One plain arrival (release: this thread's earlier accesses come first).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
}

// Waits until the phase of parity `parity` (0, 1, 0, ...) of the mbarrier completed.
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared by
// the bulk-copy unit; their arrival completes that many transactions on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                              uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#else
  (void)dst, (void)src, (void)bytes, (void)bar;
  __trap();
#endif
}

// A 2-D box of the tensor map `map` (a __grid_constant__ kernel parameter) at
// element coordinates (c0 inner, c1 outer) global -> shared by the tensor-copy
// unit (TMA); its bytes (the whole box: zeros where it leaves the tensor) complete
// that many transactions on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1,
                                            uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#else
  (void)dst, (void)map, (void)c0, (void)c1, (void)bar;
  __trap();
#endif
}

// ---- cache-hinted and volatile accesses -----------------------------------------------
// Streaming (evict-first) load and store: data touched once, so that L2 keeps what
// the next kernel reads again.
template <typename T>
__device__ __forceinline__ T ld_streaming(const T* p) {
  return __ldcs(p);
}
template <typename T>
__device__ __forceinline__ void st_streaming(T* p, T v) {
  __stcs(p, v);
}

// A load that is not cached in registers: sees other blocks' (and this block's
// other threads') atomics.
__device__ __forceinline__ int ld_volatile(const int* p) {
  return *reinterpret_cast<const volatile int*>(p);
}
__device__ __forceinline__ unsigned long long ld_volatile(const unsigned long long* p) {
  return *reinterpret_cast<const volatile unsigned long long*>(p);
}

// ---- atomics --------------------------------------------------------------------------
// fp32 -> int32 whose signed order is the order of the (non-NaN) floats, and back
// (the map is its own inverse): float maxima go through atomicMax on int.
__device__ __forceinline__ int order_key(float x) {
  const int b = __float_as_int(x);
  return b >= 0 ? b : b ^ 0x7fffffff;
}
__device__ __forceinline__ float key_value(int k) {
  return __int_as_float(k >= 0 ? k : k ^ 0x7fffffff);
}

// Thread block clusters (sm_90): this CTA's rank in its cluster; a barrier over every
// thread of the cluster that has not exited (exited threads count as arrived), with
// release / acquire ordering, so shared-memory writes before it are visible to the
// cluster's other CTAs after it; the address of the same shared-memory location in
// the cluster's CTA `rank`, and a 32-bit load from such an address.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release;\n"
      "barrier.cluster.wait.acquire;\n" ::
          : "memory");
}
__device__ __forceinline__ uint32_t cluster_map_shared(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ float ld_shared_cluster_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

}  // namespace sparkdraft::cuda
