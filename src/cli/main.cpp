// sparkdraft: the command-line tool. Subcommands live in their own files
// (cli/*.cpp); this file only wires them and maps errors to the exit statuses
// of cli/exit_status.h. Tools exit; the library throws.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/exit_status.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/error.h"
#include "sparkdraft/version.h"

namespace {

int fail(int status, const char* kind, const char* what) {
  std::fflush(stdout);
  std::fprintf(stderr, "sparkdraft: %s: %s\n", kind, what);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sparkdraft;
  using namespace sparkdraft::cli;
  CLI::App app{
      "sparkdraft: the draft side of DSpark speculative decoding (context K/V chain, draft "
      "transformer over the query block, lm_head and the Markov sampling loop), bit for bit "
      "between a CPU reference and CUDA kernels."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  app.set_version_flag("--version", std::string("sparkdraft ") + SPARKDRAFT_VERSION_STRING,
                       "Print the version and exit");
  app.footer("\n" + exit_status_table());
  std::vector<Command> commands = all_commands(app);
  // A first word that is no subcommand: say so and list them (CLI11 would say
  // "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto& c : commands) {
      known = known || c.sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + c.sub->get_name();
    }
    if (!known) {
      const std::string what = "unknown subcommand '" + std::string(argv[1]) +
                               "' (the subcommands: " + names + "; sparkdraft --help says more)";
      return fail(kExitUsage, "error", what.c_str());
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, the version, or the error
    return rc == 0 ? kExitOk : kExitUsage;
  }
  try {
    for (auto& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const InvalidArgument& e) {
    return fail(kExitUsage, "error", e.what());
  } catch (const ConfigError& e) {
    return fail(kExitBadInput, "error", e.what());
  } catch (const CheckpointError& e) {
    return fail(kExitBadInput, "error", e.what());
  } catch (const Unavailable& e) {
    return fail(kExitUnavailable, "error", e.what());
  } catch (const IoError& e) {
    return fail(kExitIo, "error", e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    return fail(kExitIo, "error", e.what());
  } catch (const DeviceError& e) {
    return fail(kExitDevice, "error", e.what());
  } catch (const std::bad_alloc&) {
    return fail(kExitInternal, "error", "out of memory");
  } catch (const std::exception& e) {
    return fail(kExitInternal, "unexpected error", e.what());
  }
  return kExitOk;
}
