// The tool against bad input, as a new user or an attacker would try it: every
// refusal has its exit status, a message that says what is wrong (the reason from
// the system included), nothing on stdout; Ctrl-C leaves no debris and a retry
// works. Permission cases run the tool as the user nobody (setpriv) when the
// tests run as root, since root reads and writes through mode bits; without
// setpriv they skip and say so.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "common/files.h"
#include "common/tool.h"

namespace sparkdraft {
namespace {

namespace fs = std::filesystem;
using test::run_tool;
using test::ToolRun;

void expect_refused(const ToolRun& r, int rc, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.rc, rc) << r.out << r.err;
  EXPECT_EQ(r.out, "") << "a refused command printed on stdout";
  for (const std::string& n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << "stderr lacks \"" << n << "\": " << r.err;
}

TEST(Robustness, UnknownSubcommandIsNamedAndTheKnownOnesListed) {
  const ToolRun r = run_tool("frobnicate");
  expect_refused(r, 2, {"unknown subcommand 'frobnicate'", "demo", "make-checkpoint", "plan"});
  EXPECT_EQ(r.err.find("A subcommand is required"), std::string::npos) << r.err;
}

TEST(Robustness, BadPresetOrStyleIsACommandLineError) {
  test::TempDir dir;
  expect_refused(run_tool("make-checkpoint --preset foo --out " + dir / "x"), 2, {"foo"});
  expect_refused(run_tool("make-checkpoint --style gothic --out " + dir / "x"), 2, {"gothic"});
  EXPECT_FALSE(fs::exists(dir / "x"));
}

TEST(Robustness, OutAtADanglingSymlinkSaysSo) {
  test::TempDir dir;
  fs::create_symlink(dir / "nowhere", dir / "link");
  const ToolRun r = run_tool("make-checkpoint --out " + dir / "link");
  expect_refused(r, 5, {"dangling symbolic link", "nowhere"});
  EXPECT_EQ(r.err.find("File exists"), std::string::npos) << r.err;
}

TEST(Robustness, OutUnderARegularFileGivesTheReason) {
  test::TempDir dir;
  test::write_file(dir / "file", "x");
  expect_refused(run_tool("make-checkpoint --out " + dir / "file/ck"), 5, {"Not a directory"});
}

// `prefix` runs the tool as a user that mode bits apply to: "" when not root,
// setpriv to nobody when root; nullopt (skip) when neither works.
std::string unprivileged_prefix(bool* skip) {
  *skip = false;
  if (::geteuid() != 0) return "";
  if (::system("setpriv --reuid=65534 --regid=65534 --clear-groups true >/dev/null 2>&1") == 0)
    return "setpriv --reuid=65534 --regid=65534 --clear-groups";
  *skip = true;
  return "";
}

TEST(Robustness, PermissionErrorsSayPermissionDenied) {
  bool skip = false;
  const std::string as = unprivileged_prefix(&skip);
  if (skip)
    GTEST_SKIP() << "running as root without setpriv: mode bits do not apply to root, so "
                    "the permission cases cannot be provoked here";
  test::TempDir dir;
  ::chmod(dir.path().c_str(), 0755);  // the unprivileged tool may enter, not write
  // An --out it cannot write: the reason, not just "cannot create".
  fs::create_directory(dir / "ro");
  ::chmod((dir / "ro").c_str(), 0555);
  ToolRun r = run_tool("make-checkpoint --out " + dir / "ro", as);
  expect_refused(r, 5, {dir / "ro", "Permission denied"});
  // A checkpoint directory of mode 000: permission denied, not "no config.json".
  r = run_tool("make-checkpoint --out " + dir / "ck");
  ASSERT_EQ(r.rc, 0) << r.err;
  ::chmod((dir / "ck").c_str(), 0755);
  ::chmod((dir / "ck/config.json").c_str(), 0644);
  ::chmod((dir / "ck/model.safetensors").c_str(), 0644);
  ASSERT_EQ(run_tool("demo --backend cpu --rounds 1 --checkpoint " + dir / "ck", as).rc, 0);
  ::chmod((dir / "ck").c_str(), 0);
  r = run_tool("demo --backend cpu --checkpoint " + dir / "ck", as);
  ::chmod((dir / "ck").c_str(), 0755);
  expect_refused(r, 3, {dir / "ck", "Permission denied"});
  EXPECT_EQ(r.err.find("no config.json"), std::string::npos) << r.err;
}

// A refused command prints nothing on stdout, not even the tiny checkpoint it
// made first; plan refuses what the backend refuses.
TEST(Robustness, RefusedCommandsPrintNothingOnStdout) {
  expect_refused(run_tool("demo --backend cpu --tp 1024"), 2, {"tp 1024", "vocabulary"});
  expect_refused(run_tool("check --backend cpu --tp 1024"), 2, {"tp 1024"});
  expect_refused(run_tool("plan --backend cpu --tp 3"), 2, {"power of two"});
  expect_refused(run_tool("plan --backend cpu --tp 1024"), 2, {"tp 1024", "vocabulary"});
  const ToolRun ok = run_tool("plan --backend cpu --tp 2");
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_NE(ok.out.find("lm_head"), std::string::npos) << ok.out;
}

// A tensor the config switches off is refused by name and switch; the flag loads it.
TEST(Robustness, UnusedWeightsAreRefusedUnlessAllowed) {
  test::TempDir dir;
  ASSERT_EQ(run_tool("make-checkpoint --style muse --out " + dir / "ck").rc, 0);
  std::string cfg = test::read_file(dir / "ck/config.json");
  const std::string on = "\"output_gate\": true";
  ASSERT_NE(cfg.find(on), std::string::npos) << cfg;
  cfg.replace(cfg.find(on), on.size(), "\"output_gate\": false");
  test::write_file(dir / "ck/config.json", cfg);
  expect_refused(run_tool("demo --backend cpu --checkpoint " + dir / "ck"), 3,
                 {"g_proj", "output_gate is false", "--allow-unused-weights"});
  const ToolRun r =
      run_tool("demo --backend cpu --rounds 1 --allow-unused-weights --checkpoint " + dir / "ck");
  EXPECT_EQ(r.rc, 0) << r.err;
}

// Starts the tool with `args` (no shell), stdout and stderr to /dev/null.
pid_t spawn_tool(const std::vector<std::string>& args, const std::string& tmpdir = "") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!tmpdir.empty()) ::setenv("TMPDIR", tmpdir.c_str(), 1);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    std::vector<char*> argv{const_cast<char*>(SPARKDRAFT_CLI_PATH)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(SPARKDRAFT_CLI_PATH, argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits (up to 120 s) until `ready()` holds or the child ends; then SIGINT.
// Returns the child's wait status.
template <class F>
int interrupt_when(pid_t pid, F&& ready) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (!ready()) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;  // ended first
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGINT);
  ::waitpid(pid, &status, 0);
  return status;
}

// Ctrl-C in the middle of writing a 4.7 GB checkpoint: nothing is left (the new
// directory goes; in a directory that was there, only what this run wrote goes),
// and the retry that used to say "already holds a checkpoint" works.
TEST(Robustness, InterruptedMakeCheckpointLeavesNoDebrisAndARetryWorks) {
  test::TempDir dir;
  for (const bool existed : {false, true}) {
    SCOPED_TRACE(existed ? "--out existed (empty)" : "--out made by the run");
    const std::string out = dir / (existed ? "old" : "new");
    if (existed) fs::create_directory(out);
    const pid_t pid = spawn_tool({"make-checkpoint", "--preset", "qwen3-8b", "--out", out});
    const int status =
        interrupt_when(pid, [&] { return fs::exists(out + "/model.safetensors.tmp"); });
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT)
        << "the run was not ended by SIGINT (status " << status << ")";
    EXPECT_EQ(fs::exists(out), existed);
    if (existed) {
      EXPECT_TRUE(fs::is_empty(out)) << "debris left in " << out;
    }
    const ToolRun retry = run_tool("make-checkpoint --preset tiny --out " + out);
    EXPECT_EQ(retry.rc, 0) << retry.err;
    EXPECT_TRUE(fs::exists(out + "/config.json"));
  }
}

// Ctrl-C during a demo removes its temporary tiny checkpoint.
TEST(Robustness, InterruptedDemoRemovesItsTinyCheckpoint) {
  test::TempDir tmp;
  const pid_t pid =
      spawn_tool({"demo", "--backend", "cpu", "--requests", "64", "--rounds", "1000"}, tmp.path());
  const int status = interrupt_when(pid, [&] {
    for (const auto& e : fs::directory_iterator(tmp.path()))
      if (fs::exists(e.path() / "config.json")) return true;
    return false;
  });
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT)
      << "the demo was not ended by SIGINT (status " << status << ")";
  EXPECT_TRUE(fs::is_empty(tmp.path())) << "the tiny checkpoint was left in " << tmp.path();
}

}  // namespace
}  // namespace sparkdraft
