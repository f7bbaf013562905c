// Runs the sparkdraft tool (SPARKDRAFT_CLI_PATH, set by CMake) as a child process
// for the CLI tests: exit status, stdout and stderr captured apart.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "common/files.h"

namespace sparkdraft::test {

struct ToolRun {
  int rc;
  std::string out, err;
};

// `args` in shell syntax, `env` (e.g. "TMPDIR=/x") prefixed to the command.
inline ToolRun run_tool(const std::string& args, const std::string& env = "") {
  TempDir tmp;
  const std::string err_path = tmp / "stderr";
  const std::string cmd = env + " " + SPARKDRAFT_CLI_PATH + " " + args + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return ToolRun{WEXITSTATUS(status), out, read_file(err_path)};
}

}  // namespace sparkdraft::test
