// Leaving no debris on Ctrl-C: while a RemoveOnInterrupt lives, SIGINT and SIGTERM
// first remove the files it names in its directory (and the directory itself when
// asked), then take their default action (the process ends as the shell expects,
// status 128 + signal). The handler only calls unlink, rmdir, signal and raise
// (async-signal-safe); the paths are formatted up front.
#pragma once

#include <string>
#include <vector>

namespace sparkdraft::cli {

class RemoveOnInterrupt {
 public:
  RemoveOnInterrupt() = default;
  // `names` are file names inside `dir`; `remove_dir`: rmdir `dir` after them (it
  // goes only when empty, so nothing else in it is lost).
  RemoveOnInterrupt(const std::string& dir, const std::vector<std::string>& names, bool remove_dir);
  ~RemoveOnInterrupt();
  RemoveOnInterrupt(const RemoveOnInterrupt&) = delete;
  RemoveOnInterrupt& operator=(const RemoveOnInterrupt&) = delete;

 private:
  int slot_ = -1;
};

}  // namespace sparkdraft::cli
