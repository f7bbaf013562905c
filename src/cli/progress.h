// The progress line of a long synthetic-checkpoint write (make-checkpoint, bench
// step's presets), on stderr: one updating line on a terminal, a line per 10% in a
// log; nothing for checkpoints under 256 MB.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

namespace sparkdraft::cli {

inline std::function<void(size_t, size_t)> write_progress(const std::string& label) {
  struct State {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    bool tty = isatty(fileno(stderr));
    int last_pct = -1;
  };
  auto st = std::make_shared<State>();
  return [st, label](size_t done, size_t total) {
    if (total < (size_t{256} << 20)) return;
    int pct = static_cast<int>(100.0 * done / total);
    if (!st->tty) pct -= pct % 10;
    if (pct == st->last_pct) return;
    st->last_pct = pct;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - st->t0).count();
    std::fprintf(stderr, "%s%s: %3d%%  %.2f / %.2f GB  %.1f s%s", st->tty ? "\r" : "",
                 label.c_str(), pct, done / 1e9, total / 1e9, s,
                 st->tty && done != total ? "" : "\n");
  };
}

}  // namespace sparkdraft::cli
