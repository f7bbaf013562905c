// The tiny synthetic checkpoint the CLI makes when no --checkpoint is given:
// written to a fresh temporary directory of its own (so concurrent runs never
// share one) and removed when the command ends, or on SIGINT / SIGTERM. What it
// says goes to stderr: a command refused after it prints nothing on stdout.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "cli/interrupt.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cli {

class TinyCheckpoint {
 public:
  TinyCheckpoint() = default;
  TinyCheckpoint(const TinyCheckpoint&) = delete;
  TinyCheckpoint& operator=(const TinyCheckpoint&) = delete;
  ~TinyCheckpoint() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // Writes the tiny preset in `style` ("qwen3" or "muse") and returns its directory.
  std::string make(const std::string& style) {
    std::error_code ec;
    const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
    if (ec)
      throw IoError("no temporary directory for the tiny checkpoint (TMPDIR='" +
                    std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "") +
                    "'): " + ec.message());
    std::string tmpl = (tmp / "sparkdraft-tiny-XXXXXX").string();
    if (!mkdtemp(tmpl.data()))
      throw IoError("cannot create a temporary directory for the tiny checkpoint in '" +
                    tmp.string() + "': " + std::strerror(errno));
    dir_ = tmpl;
    on_interrupt_.emplace(dir_, synthetic_checkpoint_files(), true);
    SyntheticOptions so;
    so.seed = 1;
    write_synthetic_checkpoint(preset_config("tiny", style), dir_, so);
    std::fprintf(stderr, "made a tiny synthetic checkpoint (%s style) in %s\n",
                 style.empty() ? "qwen3" : style.c_str(), dir_.c_str());
    return dir_;
  }

 private:
  std::string dir_;
  std::optional<RemoveOnInterrupt> on_interrupt_;
};

}  // namespace sparkdraft::cli
