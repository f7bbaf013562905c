// The subcommands of the sparkdraft tool, each registered on the CLI11 app by
// its own file.
#pragma once

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

namespace sparkdraft::cli {

struct Command {
  CLI::App* sub;
  std::function<int()> run;
};

Command add_demo(CLI::App& app);
Command add_make_checkpoint(CLI::App& app);
Command add_check(CLI::App& app);  // cli/gpu_commands.cpp
Command add_plan(CLI::App& app);
Command add_bench(CLI::App& app);

inline std::vector<Command> all_commands(CLI::App& app) {
  return {add_demo(app), add_make_checkpoint(app), add_check(app), add_plan(app), add_bench(app)};
}

}  // namespace sparkdraft::cli
