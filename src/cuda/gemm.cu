// cuBLASLt bf16 GEMM with one pinned, deterministic algorithm per shape (gemm.h).
//
// Row-major y[M, N] = x[M, K] w[N, K]^T is, in cuBLAS's column-major terms,
// Y^T (N x M, ld y_stride) = op(W) X^T with W the column-major K x N matrix
// (ld K) transposed, and X^T the column-major K x M matrix (ld x_stride): the
// "TN" layout, the one cuBLASLt's bf16 tensor-core kernels prefer.
// Why the checks on the chosen algorithm: a split-K algorithm sums partial
// products in a separate pass or in place with counters; we only accept the
// single-pass ones, so that each output is one fixed accumulation sequence.
#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/gemm.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

constexpr int kHeuristicCandidates = 16;

// Largest power of two <= 16 dividing the address and the row pitch in bytes.
uint32_t alignment_class(const void* p, int64_t row_stride) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p) |
                         static_cast<uintptr_t>(row_stride) * sizeof(bf16) | uintptr_t{16};
  return static_cast<uint32_t>(bits & (~bits + 1));
}

struct ShapeKey {
  int M, N, K;
  int64_t x_stride, y_stride;
  uint32_t align_x, align_w, align_y;
  bool operator<(const ShapeKey& o) const {
    return std::tie(M, N, K, x_stride, y_stride, align_x, align_w, align_y) <
           std::tie(o.M, o.N, o.K, o.x_stride, o.y_stride, o.align_x, o.align_w, o.align_y);
  }
  std::string describe() const {
    return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
           " x_stride=" + std::to_string(x_stride) + " y_stride=" + std::to_string(y_stride) +
           " alignment x/w/y=" + std::to_string(align_x) + "/" + std::to_string(align_w) + "/" +
           std::to_string(align_y);
  }
};

// The algorithm of a GEMM family: every M of the same (N, K, strides, alignment)
// runs one algorithm, chosen once for kPlanRows rows, so that a row's bits never
// depend on how many other rows share the call (SPEC section 3, invariance).
constexpr int kPlanRows = 64;

ShapeKey family_of(ShapeKey k) {
  k.M = kPlanRows;
  return k;
}

// The descriptors and the pinned algorithm of one shape.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, y_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (y_layout != nullptr) cublasLtMatrixLayoutDestroy(y_layout);
    if (x_layout != nullptr) cublasLtMatrixLayoutDestroy(x_layout);
    if (w_layout != nullptr) cublasLtMatrixLayoutDestroy(w_layout);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { SD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref)); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref); }
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, T value) {
    SD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  }
};

template <class T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  SD_CUBLAS_CHECK(
      cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return value;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("cuda::GemmRunner::run: " + what);
}

}  // namespace

struct GemmRunner::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer<unsigned char> workspace;
  std::map<ShapeKey, std::unique_ptr<Plan>> plans;        // per M
  std::map<ShapeKey, cublasLtMatmulAlgo_t> family_algos;  // per family (M = kPlanRows)

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    plans.clear();
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  static std::unique_ptr<Plan> make_layouts(const ShapeKey& k) {
    auto plan = std::make_unique<Plan>();
    SD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_w = CUBLAS_OP_T, trans_x = CUBLAS_OP_N;
    SD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                   &trans_w, sizeof(trans_w)));
    SD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                   &trans_x, sizeof(trans_x)));
    SD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->w_layout, CUDA_R_16BF, k.K, k.N, k.K));
    SD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->x_layout, CUDA_R_16BF, k.K, k.M, k.x_stride));
    SD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->y_layout, CUDA_R_16BF, k.N, k.M, k.y_stride));
    return plan;
  }

  // The family's algorithm, asked of the heuristic once at M = kPlanRows.
  cublasLtMatmulAlgo_t family_algo(const ShapeKey& shape) {
    const ShapeKey k = family_of(shape);
    if (auto it = family_algos.find(k); it != family_algos.end()) return it->second;
    auto plan = make_layouts(k);
    Preference pref;
    pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace.bytes()));
    pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
             static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_w);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_x);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_y);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_y);

    cublasLtMatmulHeuristicResult_t results[kHeuristicCandidates] = {};
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        handle, plan->desc, plan->w_layout, plan->x_layout, plan->y_layout, plan->y_layout,
        pref.pref, kHeuristicCandidates, results, &returned);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      throw DeviceError("cuBLASLt heuristic failed (status " +
                        std::to_string(static_cast<int>(st)) + ") for GEMM " + k.describe());
    for (int i = 0; i < returned; ++i) {
      const cublasLtMatmulHeuristicResult_t& r = results[i];
      if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > workspace.bytes()) continue;
      const auto splits = algo_config<int32_t>(r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
      const auto scheme = algo_config<uint32_t>(r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
      if (splits > 1 || scheme != CUBLASLT_REDUCTION_SCHEME_NONE) continue;
      family_algos.emplace(k, r.algo);
      return r.algo;
    }
    throw DeviceError(
        "cuBLASLt offers no single-pass (split-K 1, reduction NONE) algorithm for GEMM " +
        k.describe() + " (" + std::to_string(returned) + " candidates)");
  }
};

GemmRunner::GemmRunner(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  SD_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  impl_->workspace = DeviceBuffer<unsigned char>(workspace_bytes);
}

GemmRunner::~GemmRunner() = default;

size_t GemmRunner::pinned_shapes() const { return impl_->plans.size(); }
size_t GemmRunner::workspace_bytes() const { return impl_->workspace.bytes(); }

void GemmRunner::run(const bf16* x, int64_t x_stride, const bf16* w, int M, int N, int K, bf16* y,
                     int64_t y_stride, cudaStream_t stream) {
  require(M >= 0, "M must be >= 0, got " + std::to_string(M));
  require(N >= 1, "N must be >= 1, got " + std::to_string(N));
  require(K >= 1, "K must be >= 1, got " + std::to_string(K));
  require(x_stride >= K, "x_stride " + std::to_string(x_stride) + " < K " + std::to_string(K));
  require(y_stride >= N, "y_stride " + std::to_string(y_stride) + " < N " + std::to_string(N));
  if (M == 0) return;
  require(x != nullptr && w != nullptr && y != nullptr, "x, w and y must not be null");

  const ShapeKey key{M,
                     N,
                     K,
                     x_stride,
                     y_stride,
                     alignment_class(x, x_stride),
                     alignment_class(w, K),
                     alignment_class(y, y_stride)};
  auto it = impl_->plans.find(key);
  if (it == impl_->plans.end()) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    SD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    require(capture == cudaStreamCaptureStatusNone,
            "GEMM " + key.describe() +
                " first seen during CUDA graph capture; run each shape once before capturing");
    auto plan = Impl::make_layouts(key);
    plan->algo = impl_->family_algo(key);
    cublasLtMatmulHeuristicResult_t check{};
    const cublasStatus_t st =
        cublasLtMatmulAlgoCheck(impl_->handle, plan->desc, plan->w_layout, plan->x_layout,
                                plan->y_layout, plan->y_layout, &plan->algo, &check);
    if (st != CUBLAS_STATUS_SUCCESS || check.workspaceSize > impl_->workspace.bytes())
      throw DeviceError("cuBLASLt: the algorithm pinned for the GEMM family of " + key.describe() +
                        " does not run at M=" + std::to_string(M) + " (status " +
                        std::to_string(static_cast<int>(st)) + ")");
    it = impl_->plans.emplace(key, std::move(plan)).first;
  }
  const Plan& plan = *it->second;
  const float alpha = 1.0f, beta = 0.0f;
  SD_CUBLAS_CHECK(cublasLtMatmul(
      impl_->handle, plan.desc, &alpha, w, plan.w_layout, x, plan.x_layout, &beta, y, plan.y_layout,
      y, plan.y_layout, &plan.algo, impl_->workspace.data(), impl_->workspace.bytes(), stream));
}

}  // namespace sparkdraft::cuda
