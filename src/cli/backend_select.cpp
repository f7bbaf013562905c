// CLI backend selection (see backend_select.h).
#include "cli/backend_select.h"

#include <cstdio>

#include "sparkdraft/error.h"

#if defined(SPARKDRAFT_HAVE_CUDA)
#include "sparkdraft/cuda/draft.h"
#endif

namespace sparkdraft::cli {

std::string backend_help() {
  return "Backend: auto (the GPU when one is present, else the CPU), cpu, or cuda";
}

void require_backend_available(const std::string& kind) {
#if defined(SPARKDRAFT_HAVE_CUDA)
  if (kind == "cuda" && !cuda::cuda_available())
    throw Unavailable("--backend cuda: no usable CUDA GPU here");
#else
  if (kind == "cuda")
    throw Unavailable("--backend cuda: this build has no CUDA backend (no nvcc at configure time)");
#endif
}

std::unique_ptr<DraftBackend> make_backend(const std::string& kind,
                                           std::shared_ptr<const Checkpoint> ckpt,
                                           const DraftOptions& options) {
  if (kind != "auto" && kind != "cpu" && kind != "cuda")
    throw InvalidArgument("--backend must be auto, cpu or cuda, not '" + kind + "'");
  require_backend_available(kind);
  // Every backend gets options validated the same way (the CPU backend does it
  // itself too; the GPU backend is made only after this check).
  validate_options(ckpt->config(), options);
  if (kind == "cpu") return make_cpu_backend(std::move(ckpt), options);
#if defined(SPARKDRAFT_HAVE_CUDA)
  const bool gpu = cuda::cuda_available();
  if (kind == "cuda" && !gpu) throw Unavailable("--backend cuda: no usable CUDA GPU here");
  if (gpu && options.tp == 1) {
    auto backend = std::make_unique<cuda::CudaDraft>(std::move(ckpt), options);
    std::printf("backend: cuda (GPU found)\n");
    return backend;
  }
  if (gpu && kind == "cuda")
    throw InvalidArgument("--backend cuda drafts at tp 1; --tp > 1 runs the CPU thread ranks");
  // Built before saying which, so that a refused option prints nothing.
  auto backend = make_cpu_backend(std::move(ckpt), options);
  if (gpu)
    std::printf("backend: cpu (--tp %d runs the vocab-parallel loop on CPU thread ranks)\n",
                options.tp);
  else
    std::printf("backend: cpu (no CUDA GPU found)\n");
  return backend;
#else
  if (kind == "cuda")
    throw Unavailable("--backend cuda: this build has no CUDA backend (no nvcc at configure time)");
  auto backend = make_cpu_backend(std::move(ckpt), options);
  std::printf("backend: cpu (this build has no CUDA backend)\n");
  return backend;
#endif
}

std::string backend_plan(const DraftBackend& backend) {
  const DraftOptions& o = backend.options();
  std::string text = backend.name() + " backend";
  if (backend.name() == "cpu") text += ", " + std::to_string(o.threads) + " threads";
  return text + "\n" + backend.plan().text();
}

}  // namespace sparkdraft::cli
