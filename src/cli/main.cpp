// sparkdraft: the command-line tool. Subcommands live in their own files
// (cli/*.cpp); this file only wires them. Tools exit; the library throws.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "sparkdraft/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "sparkdraft: the draft side of DSpark speculative decoding (context K/V chain, draft "
      "transformer over the query block, lm_head and the Markov sampling loop), bit for bit "
      "between a CPU reference and CUDA kernels."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  std::vector<sparkdraft::cli::Command> commands = sparkdraft::cli::all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const sparkdraft::Error& e) {
    std::fprintf(stderr, "sparkdraft: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sparkdraft: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
