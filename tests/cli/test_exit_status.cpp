// The tool's exit statuses (src/cli/exit_status.h), one by one: the table is
// printed by --help; every refusal exits with its own status, names what is
// wrong on stderr and prints nothing on stdout (no partial output).
// Statuses 1 (check found a difference) and 6 (a CUDA call failed) need a GPU
// and are the GPU tests' to provoke; 7 is reserved for bugs.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "cli/exit_status.h"
#include "common/errors.h"
#include "common/files.h"
#include "common/tool.h"
#include "io/poke.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/version.h"

namespace sparkdraft {
namespace {

namespace fs = std::filesystem;
using namespace sparkdraft::cli;

using test::ToolRun;
ToolRun tool(const std::string& args, const std::string& env = "") {
  return test::run_tool(args, env);
}

// A refusal: the status, the needles on stderr, nothing on stdout.
void expect_refused(const std::string& args, int status, const std::vector<std::string>& needles,
                    const std::string& env = "") {
  SCOPED_TRACE("sparkdraft " + args);
  const ToolRun r = tool(args, env);
  EXPECT_EQ(r.rc, status) << "stderr: " << r.err << "\nstdout: " << r.out;
  EXPECT_EQ(r.out, "") << "partial output on stdout";
  test::expect_mentions(r.err, needles);
}

std::string tiny(const test::TempDir& dir, const std::string& name = "ck") {
  SyntheticOptions so;
  write_synthetic_checkpoint(preset_config("tiny"), dir / name, so);
  return dir / name;
}

TEST(ExitStatus, HelpPrintsTheTableOfDistinctStatuses) {
  const ToolRun r = tool("--help");
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  std::set<int> codes;
  for (const auto& e : kExitStatuses) {
    EXPECT_TRUE(codes.insert(e.code).second) << "status " << e.code << " listed twice";
    EXPECT_NE(r.out.find("  " + std::to_string(e.code) + "  " + e.meaning), std::string::npos)
        << "status " << e.code << " missing from --help:\n"
        << r.out;
  }
  EXPECT_EQ(codes, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(ExitStatus, VersionIsZero) {
  const ToolRun r = tool("--version");
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find(std::string("sparkdraft ") + SPARKDRAFT_VERSION_STRING), std::string::npos)
      << r.out;
}

TEST(ExitStatus, UsageErrorsAreTwo) {
  expect_refused("demo --seed -1", kExitUsage, {"--seed", "'-1'"});
  expect_refused("demo --seed 18446744073709551616", kExitUsage, {"--seed", "exceeds 2^64 - 1"});
  expect_refused("demo --seed 1e3", kExitUsage, {"--seed", "'1e3'"});
  expect_refused("make-checkpoint --seed 99999999999999999999999 --out /tmp/sparkdraft-never",
                 kExitUsage, {"--seed"});
  expect_refused("demo --threads 100000", kExitUsage, {"--threads", "100000"});
  expect_refused("demo --threads -1", kExitUsage, {"--threads"});
  expect_refused("plan --max-reqs 0", kExitUsage, {"--max-reqs", "0"});
  expect_refused("demo --checkpoint ''", kExitUsage, {"--checkpoint", "must not be empty"});
  expect_refused("plan --checkpoint ''", kExitUsage, {"--checkpoint", "must not be empty"});
  expect_refused("make-checkpoint --out ''", kExitUsage, {"--out", "must not be empty"});
  expect_refused("demo --tp 3", kExitUsage, {"tp 3"});
  expect_refused("demo --no-such-flag", kExitUsage, {"--no-such-flag"});
  expect_refused("", kExitUsage, {"subcommand"});
  expect_refused("demo --backend tpu", kExitUsage, {"tpu"});
  expect_refused("check --style gemma", kExitUsage, {"--style", "gemma"});
  expect_refused("check --tp 3 --backend cpu", kExitUsage, {"tp 3"});
  expect_refused("check --backend cpu", kExitUsage, {"--backend cpu", "--tp N (2 or more)"});
  expect_refused("check --devices 0", kExitUsage, {"--devices", "--tp N"});
  expect_refused("check --tp 2 --devices -1", kExitUsage, {"--devices"});
  expect_refused("bench step --devices 0 1", kExitUsage, {"--devices", "--tp N"});
  expect_refused("bench step --tp 3", kExitUsage, {"tp 3"});
  expect_refused("check --backend tpu", kExitUsage, {"--backend", "tpu"});
  // A bad preset is a bad flag value like any other (it was 3, a bad checkpoint).
  expect_refused("make-checkpoint --preset nope --out /tmp/sparkdraft-never", kExitUsage,
                 {"--preset", "nope"});
  EXPECT_FALSE(fs::exists("/tmp/sparkdraft-never"));
  expect_refused("bench step --rows 0", kExitUsage, {"--rows", "0"});
  expect_refused("bench step --rows 1 70000", kExitUsage, {"--rows", "70000"});
  expect_refused("bench step --ctx 0", kExitUsage, {"--ctx", "0"});
  expect_refused("bench step --repeats 0", kExitUsage, {"--repeats", "0"});
  expect_refused("bench step --preset nope", kExitUsage, {"--preset", "nope"});
  expect_refused("bench step --checkpoint ''", kExitUsage, {"--checkpoint", "must not be empty"});
  expect_refused("bench step --checkpoint /x --preset tiny", kExitUsage, {"--checkpoint"});
  expect_refused("bench step --spec --rows 8", kExitUsage, {"--spec", "--rows"});
  expect_refused("bench allreduce --tp 1", kExitUsage, {"--tp", "1"});
  expect_refused("bench allreduce --hidden 0", kExitUsage, {"--hidden", "0"});
  expect_refused("bench verify --dtype f16", kExitUsage, {"--dtype", "f16"});
  expect_refused("bench verify --rows 0", kExitUsage, {"--rows", "0"});
  expect_refused("bench verify --temperature -1", kExitUsage, {"--temperature"});
  // NaN fails no comparison, so a range check alone lets it through (demo once made its tiny
  // checkpoint and printed its header before the scenario refused the noise).
  expect_refused("demo --target-noise nan", kExitUsage, {"--target-noise", "'nan'", "finite"});
  expect_refused("demo --target-noise inf", kExitUsage, {"--target-noise", "'inf'"});
  expect_refused("bench verify --temperature nan", kExitUsage, {"--temperature", "finite"});
  expect_refused("bench markov --temperature nan", kExitUsage, {"--temperature", "finite"});
  expect_refused("bench markov --temperature -1", kExitUsage, {"--temperature", "-1"});
  expect_refused("bench allreduce --timeout nan", kExitUsage, {"--timeout", "finite"});
  expect_refused("demo --target-noise x", kExitUsage, {"--target-noise"});
  expect_refused("bench verify --form shared", kExitUsage, {"--form", "shared"});
  expect_refused("bench verify --threads 100", kExitUsage, {"--threads", "100"});
  expect_refused("bench verify --resident-rows 2", kExitUsage,
                 {"--resident-rows needs --form resident"});
  expect_refused("bench", kExitUsage, {"subcommand"});
}

TEST(ExitStatus, TheLargestSeedIsAccepted) {
  const ToolRun r = tool("demo --backend cpu --requests 1 --rounds 1 --seed 18446744073709551615");
  EXPECT_EQ(r.rc, kExitOk) << r.err;
}

TEST(ExitStatus, BadCheckpointsAreThree) {
  test::TempDir dir;
  test::write_file(dir / "file", "x");
  expect_refused("demo --checkpoint " + dir / "file", kExitBadInput,
                 {dir / "file", "is not a directory"});
  expect_refused("demo --checkpoint " + dir / "absent", kExitBadInput,
                 {dir / "absent", "does not exist"});

  const std::string ck = tiny(dir);
  const uint16_t nan = 0x7fc0;
  test::poke_tensor(ck + "/model.safetensors", "lm_head.weight", 130, &nan, 2);
  expect_refused("demo --backend cpu --checkpoint " + ck, kExitBadInput,
                 {"'lm_head.weight'", "NaN", "index 130", "--allow-nonfinite-weights"});
  const ToolRun allowed = tool(
      "demo --backend cpu --requests 1 --rounds 1 --allow-nonfinite-weights --checkpoint " + ck);
  EXPECT_EQ(allowed.rc, kExitOk) << allowed.err;

  const std::string ck2 = tiny(dir, "ck2");
  fs::remove(ck2 + "/config.json");
  fs::create_directory(ck2 + "/config.json");
  expect_refused("demo --checkpoint " + ck2, kExitBadInput, {ck2 + "/config.json", "a directory"});
  fs::remove(ck2 + "/config.json");
  fs::create_symlink("config.json", ck2 + "/config.json");
  expect_refused("demo --checkpoint " + ck2, kExitBadInput,
                 {ck2 + "/config.json", "symbolic links"});

  const std::string ck3 = tiny(dir, "ck3");
  fs::remove(ck3 + "/model.safetensors");
  ASSERT_EQ(::mkfifo((ck3 + "/model.safetensors").c_str(), 0600), 0);
  expect_refused("demo --checkpoint " + ck3, kExitBadInput, {ck3 + "/model.safetensors", "a FIFO"});
}

TEST(ExitStatus, MissingGpuOrCudaBackendIsFour) {
  const ToolRun r = tool("check --requests 1 --rounds 1");
  if (r.rc == kExitUnavailable) {
    EXPECT_EQ(r.out, "");
    test::expect_mentions(r.err, {"check needs"});
    expect_refused("demo --backend cuda", kExitUnavailable, {"--backend cuda"});
    expect_refused("bench markov --rows 1", kExitUnavailable, {"bench markov needs"});
    expect_refused("bench step --rows 1 --ctx 8", kExitUnavailable, {"bench step needs"});
    expect_refused("bench allreduce --rows 1", kExitUnavailable, {"bench allreduce needs"});
    expect_refused("bench verify --rows 1", kExitUnavailable, {"bench verify needs"});
  } else {
    // A CUDA build on a machine with a GPU: check runs, and finds no difference.
    EXPECT_EQ(r.rc, kExitOk) << r.err << r.out;
  }
}

TEST(ExitStatus, FileSystemRefusalsAreFive) {
  test::TempDir dir;
  const std::string ck = tiny(dir);
  const std::string before = test::read_file(ck + "/model.safetensors");
  expect_refused("make-checkpoint --seed 9 --out " + ck, kExitIo,
                 {ck, "already holds a checkpoint", "--force"});
  EXPECT_EQ(test::read_file(ck + "/model.safetensors"), before)
      << "the refused write changed the checkpoint";
  const ToolRun forced = tool("make-checkpoint --seed 9 --force --out " + ck);
  EXPECT_EQ(forced.rc, kExitOk) << forced.err;
  EXPECT_NE(test::read_file(ck + "/model.safetensors"), before) << "--force did not overwrite";

  test::write_file(dir / "file", "x");
  expect_refused("make-checkpoint --out " + dir / "file", kExitIo,
                 {dir / "file", "not a directory"});
  expect_refused("demo --backend cpu", kExitIo, {"temporary directory", "/nonexistent-tmp"},
                 "TMPDIR=/nonexistent-tmp");
}

}  // namespace
}  // namespace sparkdraft
