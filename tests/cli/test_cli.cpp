// The sparkdraft tool end to end (the binary the README runs): every subcommand
// explains itself with --help; make-checkpoint writes a DeepSpec-style tiny
// checkpoint that demo loads and drafts with; demo prints draft tokens for 3
// requests over 3 rounds in well under 10 s; bad options fail with a message.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "common/tool.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/safetensors.h"
#include "test_util.h"

namespace sparkdraft {
namespace {

struct Result {
  int rc;
  std::string out;  // stdout, then stderr
};

Result run(const std::string& args) {
  const test::ToolRun r = test::run_tool(args);
  return Result{r.rc, r.out + r.err};
}

TEST(Cli, EverySubcommandHasHelp) {
  for (const char* sub : {"", "demo", "make-checkpoint", "check", "plan", "bench markov",
                          "bench step", "bench allreduce", "bench verify"}) {
    const Result r = run(std::string(sub) + " --help");
    EXPECT_EQ(r.rc, 0) << sub << ": " << r.out;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub << ": " << r.out;
  }
  EXPECT_NE(run("make-checkpoint --help").out.find("--preset"), std::string::npos);
  EXPECT_NE(run("demo --help").out.find("--requests"), std::string::npos);
  const std::string step = run("bench step --help").out;
  for (const char* needle :
       {"--preset", "--checkpoint", "--preset-dir", "--ctx", "--rows", "--repeats", "--json",
        "--spec", "floor", "bit for bit", "--tp-reduce"})
    EXPECT_NE(step.find(needle), std::string::npos) << needle << " missing from:\n" << step;
  const std::string verify = run("bench verify --help").out;
  for (const char* needle :
       {"--vocab", "--rows", "--steps", "--dtype", "--method", "--form", "resident", "--repeats",
        "--json", "floor", "bit for bit", "151936 and 202048"})
    EXPECT_NE(verify.find(needle), std::string::npos) << needle << " missing from:\n" << verify;
  const std::string allreduce = run("bench allreduce --help").out;
  for (const char* needle : {"--tp", "--rows", "--hidden", "--repeats", "--json", "ncclAllReduce",
                             "our fused one", "bit for bit", "2 or more"})
    EXPECT_NE(allreduce.find(needle), std::string::npos) << needle << " missing from:\n"
                                                         << allreduce;
}

TEST(Cli, MakeCheckpointThenDemoDraftsThreeRequestsOverThreeRounds) {
  testing::TempDir dir;
  const Result made = run("make-checkpoint --preset tiny --seed 7 --out " + dir.path());
  ASSERT_EQ(made.rc, 0) << made.out;
  // DeepSpec / HF form: a Qwen3DSparkModel config.json next to model.safetensors.
  std::ifstream cfg(dir / "config.json");
  const std::string json((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("Qwen3DSparkModel"), std::string::npos) << json;
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors"));

  const auto t0 = std::chrono::steady_clock::now();
  const Result demo =
      run("demo --backend cpu --checkpoint " + dir.path() + " --requests 3 --rounds 3");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(demo.rc, 0) << demo.out;
  EXPECT_LT(s, 10.0) << "demo took " << s << " s";
  const std::regex line(R"(request (\d) +anchor \d+ @ \d+ +T [0-9.]+ +draft:( \d+){7})");
  int lines = 0, rounds = 0;
  std::istringstream in(demo.out);
  for (std::string l; std::getline(in, l);) {
    lines += std::regex_search(l, line);
    rounds += l.rfind("round ", 0) == 0;
  }
  EXPECT_EQ(rounds, 3) << demo.out;
  EXPECT_EQ(lines, 9) << demo.out;
}

// The demo verifies with the real verifier: each request continues from the
// token it emitted, at a + k + 1; with no noise in the stand-in target every draft
// is accepted (a mock verifier accepts fewer than N); it explains its columns and
// says what to run next.
TEST(Cli, DemoVerifiesAndExplainsItself) {
  for (const char* noise : {"0", "0.3"}) {
    const Result r =
        run(std::string("demo --backend cpu --rounds 3 --requests 3 --target-noise ") + noise);
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::regex line(
        R"(request (\d) +anchor (\d+) @ (\d+) +T [0-9.]+ +draft:(( \d+){7}) +accepted (\d) +emitted (\d+))");
    std::map<int, std::pair<long long, long long>> next;  // request -> (anchor, position)
    int lines = 0, accepted = 0;
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);) {
      std::smatch m;
      if (!std::regex_search(l, m, line)) continue;
      ++lines;
      const int req = std::stoi(m[1]), k = std::stoi(m[6]);
      const long long anchor = std::stoll(m[2]), pos = std::stoll(m[3]);
      if (next.count(req)) {
        EXPECT_EQ(anchor, next[req].first) << "request " << req << " does not continue from the "
                                           << "emitted token:\n"
                                           << r.out;
        EXPECT_EQ(pos, next[req].second) << r.out;
      }
      next[req] = {std::stoll(m[7]), pos + k + 1};
      accepted += k;
      if (std::string(noise) == "0") {
        EXPECT_EQ(k, 7) << l;
      }
    }
    EXPECT_EQ(lines, 9) << r.out;
    for (const char* needle :
         {"legend: request = request id",
          "accepted k =", "emitted =", "acceptance per draft position",
          "mean accepted length: ", "next: `sparkdraft check", "examples/python/spec_decode.py"})
      EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " missing from:\n" << r.out;
    char mean[64];
    std::snprintf(mean, sizeof mean, "mean accepted length: %.2f", accepted / 9.0);
    EXPECT_NE(r.out.find(mean), std::string::npos) << mean << " missing from:\n" << r.out;
  }
}

TEST(Cli, DemoWithoutCheckpointMakesATinyOne) {
  const Result r = run("demo --backend cpu --rounds 3 --requests 3");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("made a tiny synthetic checkpoint"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done: 3 requests x 3 rounds"), std::string::npos) << r.out;
}

// check --backend cpu --tp N needs no GPU: the CPU backend's TP N against TP 1.
TEST(Cli, CheckCpuTpNAgainstTp1) {
  Result r = run("check --backend cpu --tp 2 --rounds 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* needle : {"cpu tp 1 vs cpu tp 2", "comparisons bit for bit equal",
                             "layers sharded", "made a tiny synthetic checkpoint"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " missing from:\n" << r.out;
  r = run("check --backend cpu --tp 8 --style muse --rounds 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("layers replicated"), std::string::npos) << r.out;
}

// The confidence head (contract.md section 9) from the command line: make-checkpoint's
// tiny-conf preset drafts with a confidence per token in the demo, `check --tp 2`
// compares the confidences, and a checkpoint holding the head under a config that
// switches it off is refused (status 3) naming the flag.
TEST(Cli, ConfidenceHeadCheckpointDemoAndCheck) {
  testing::TempDir dir;
  ASSERT_EQ(run("make-checkpoint --preset tiny-conf --out " + dir.path()).rc, 0);
  Result r = run("demo --backend cpu --checkpoint " + dir.path() + " --requests 2 --rounds 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::regex line(R"(draft:( \d+){7} +confidence:( [01]\.\d\d){7} +accepted)");
  int lines = 0;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines += std::regex_search(l, line);
  EXPECT_EQ(lines, 4) << r.out;
  r = run("check --backend cpu --tp 2 --rounds 1 --checkpoint " + dir.path());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("confidences: cpu tp 1 vs cpu tp 2"), std::string::npos) << r.out;

  testing::TempDir off;
  ASSERT_EQ(run("make-checkpoint --preset tiny --confidence-head plain --out " + off.path()).rc, 0);
  std::ifstream cfg_in(off / "config.json");
  std::string json((std::istreambuf_iterator<char>(cfg_in)), std::istreambuf_iterator<char>());
  cfg_in.close();
  const std::string on = "\"enable_confidence_head\": true";
  ASSERT_NE(json.find(on), std::string::npos) << json;
  json.replace(json.find(on), on.size(), "\"enable_confidence_head\": false");
  std::ofstream(off / "config.json") << json;
  r = run("plan --backend cpu --checkpoint " + off.path());
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("enable_confidence_head is false"), std::string::npos) << r.out;
}

// The gated and rnn Markov heads (contract.md section 13) from the command line:
// make-checkpoint's presets, `check --backend cpu --tp 4` bit for bit, the plan names the head,
// and the head's projection under a config that says vanilla is refused (status 3).
TEST(Cli, MarkovHeadPresetsCheckAndPlan) {
  for (const std::string type : {"gated", "rnn"}) {
    SCOPED_TRACE(type);
    testing::TempDir dir;
    ASSERT_EQ(run("make-checkpoint --preset tiny-" + type + " --out " + dir.path()).rc, 0);
    Result r = run("check --backend cpu --tp 4 --rounds 1 --checkpoint " + dir.path());
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("comparisons bit for bit equal"), std::string::npos) << r.out;
    r = run("plan --backend cpu --checkpoint " + dir.path());
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find(type + " Markov head"), std::string::npos) << r.out;
    std::ifstream cfg_in(dir / "config.json");
    std::string json((std::istreambuf_iterator<char>(cfg_in)), std::istreambuf_iterator<char>());
    cfg_in.close();
    const std::string on = "\"markov_head_type\": \"" + type + "\"";
    ASSERT_NE(json.find(on), std::string::npos) << json;
    json.replace(json.find(on), on.size(), "\"markov_head_type\": \"vanilla\"");
    std::ofstream(dir / "config.json") << json;
    r = run("plan --backend cpu --checkpoint " + dir.path());
    EXPECT_EQ(r.rc, 3) << r.out;
    EXPECT_NE(r.out.find("markov_head_type is vanilla"), std::string::npos) << r.out;
  }
}

// The fill-in layout (contract.md section 14) from the command line: make-checkpoint's
// tiny-fillin writes the speculators form, the demo drafts 7 tokens a request from it, the
// plan names the layout, and `check --tp 2` compares TP 2 with TP 1.
TEST(Cli, FillInCheckpointDemoPlanAndCheck) {
  testing::TempDir dir;
  ASSERT_EQ(run("make-checkpoint --preset tiny-fillin --out " + dir.path()).rc, 0);
  std::ifstream cfg_in(dir / "config.json");
  const std::string json((std::istreambuf_iterator<char>(cfg_in)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"speculators_model_type\": \"dspark\""), std::string::npos) << json;
  Result r = run("demo --backend cpu --checkpoint " + dir.path() + " --requests 2 --rounds 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::regex line(R"(draft:( \d+){7} +accepted)");
  int lines = 0;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines += std::regex_search(l, line);
  EXPECT_EQ(lines, 4) << r.out;
  r = run("plan --backend cpu --checkpoint " + dir.path());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("layout: fill-in (1 + N query slots"), std::string::npos) << r.out;
  r = run("check --backend cpu --tp 2 --rounds 2 --checkpoint " + dir.path());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("comparisons bit for bit equal"), std::string::npos) << r.out;
}

// A speculators checkpoint without the verifier's embed_tokens / lm_head (the real form):
// demo refuses it (bad input, naming --target-model) and, given the target model's
// directory, drafts exactly what the whole checkpoint drafts.
TEST(Cli, SpeculatorsCheckpointDraftsWithTheTargetModelsWeights) {
  testing::TempDir dir;
  const std::string whole = dir / "whole", draft = dir / "draft", target = dir / "target";
  ASSERT_EQ(run("make-checkpoint --preset tiny-fillin --out " + whole).rc, 0);
  const Checkpoint full = Checkpoint::load(whole);
  std::filesystem::create_directories(draft);
  std::filesystem::create_directories(target);
  std::filesystem::copy_file(whole + "/config.json", draft + "/config.json");
  SafetensorsWriter d, t;
  for (const LoadedTensor& x : full.tensors()) {
    const bool verifier = x.name == "embed_tokens.weight" || x.name == "lm_head.weight";
    (verifier ? t : d)
        .add_copy(verifier && x.name == "embed_tokens.weight" ? "model." + x.name : x.name, x.dtype,
                  x.shape, x.data);
  }
  d.write(draft + "/model.safetensors");
  t.write(target + "/model.safetensors");
  const std::string demo = "demo --backend cpu --requests 2 --rounds 2 --checkpoint ";
  Result r = run(demo + draft);
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("--target-model"), std::string::npos) << r.out;
  auto drafts = [](const std::string& out) {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (l.find("draft:") != std::string::npos) lines.push_back(l);
    return lines;
  };
  const Result want = run(demo + whole);
  ASSERT_EQ(want.rc, 0) << want.out;
  r = run(demo + draft + " --target-model " + target);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(drafts(r.out), drafts(want.out));
  EXPECT_EQ(drafts(r.out).size(), 4u) << r.out;
}

// plan --tp N (the GPU's plan is host logic: a CUDA build needs no GPU for it) says
// how the ranks shard: tiny's layers split over 2 ranks, not over 4 (2 KV heads).
TEST(Cli, PlanTpNSaysHowTheRanksShard) {
  Result r = run("plan --tp 2");
  if (r.rc == 4) GTEST_SKIP() << "this build has no CUDA backend: " << r.out;
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* needle :
       {"tensor parallel", "layers+vocab", "2 ranks: QKV by heads", "the fused peer boundary",
        "else an all-gather of the fp32 subtrees", "one graph per row count on every rank"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " missing from:\n" << r.out;
  r = run("plan --tp 4");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("4 ranks: the layers replicated (2 KV heads"), std::string::npos) << r.out;
  r = run("plan --tp 3");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("power of two"), std::string::npos) << r.out;
  r = run("check --tp 2 --tp-reduce sometimes");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("auto,eager,fused"), std::string::npos) << r.out;
}

// check --step-pdl (the fused step with or without programmatic dependent launch) is a GPU
// launch option of the TP 1 check: refused with the CPU backend and at --tp N, before any work.
TEST(Cli, CheckStepPdlIsRefusedWhereItCannotApply) {
  Result r = run("check --backend cpu --tp 2 --step-pdl off");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--step-pdl needs --backend cuda"), std::string::npos) << r.out;
  r = run("check --tp 2 --step-pdl on");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--step-pdl applies to --tp 1"), std::string::npos) << r.out;
  r = run("check --step-pdl sometimes");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("on,off"), std::string::npos) << r.out;
}

// `plan --backend cuda` runs the backend's own refusals first: the variants the GPU runs at TP 1
// only (here the top-k Markov loop) are refused at --tp 2 with the backend's message and the
// config's exit status, and nothing is printed as a plan.
TEST(Cli, PlanCudaRefusesWhatTheBackendRefuses) {
  testing::TempDir dir;
  const Result made = run("make-checkpoint --preset tiny-topk --out " + dir.path());
  ASSERT_EQ(made.rc, 0) << made.out;
  Result r = run("plan --checkpoint " + dir.path() + " --tp 2");
  if (r.rc == 4) GTEST_SKIP() << "this build has no CUDA backend: " << r.out;
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("top-k Markov loop (markov_topk 16, contract.md 12.4) at TP 1 only"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("markov loop:"), std::string::npos) << "a plan was printed:\n" << r.out;
  r = run("plan --checkpoint " + dir.path());
  EXPECT_EQ(r.rc, 0) << r.out;
  r = run("plan --backend cpu --checkpoint " + dir.path() + " --tp 2");
  EXPECT_EQ(r.rc, 0) << "the CPU backend runs top-k at any TP:\n" << r.out;
}

// A draft shaped for a given target: vocabulary, target hidden size, taps, block size.
TEST(Cli, MakeCheckpointTakesTheTargetsShape) {
  testing::TempDir dir;
  const Result made =
      run("make-checkpoint --preset tiny --vocab 96 --target-hidden 40 --target-layers 0 2 3 "
          "--block-size 4 --out " +
          dir.path());
  ASSERT_EQ(made.rc, 0) << made.out;
  const Checkpoint ck = Checkpoint::load(dir.path());
  EXPECT_EQ(ck.config().vocab_size, 96);
  EXPECT_EQ(ck.config().mask_token_id, 95);  // the preset's 999 is out of range
  EXPECT_EQ(ck.config().target_hidden_size, 40);
  EXPECT_EQ(ck.config().target_layer_ids, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(ck.config().block_size, 4);
  EXPECT_EQ(ck.weights().layers.size(), 2u);
  // A shape the config refuses is refused before anything is written.
  testing::TempDir bad;
  const Result refused =
      run("make-checkpoint --preset tiny --target-layers 3 1 --out " + bad.path());
  EXPECT_NE(refused.rc, 0);
  EXPECT_FALSE(std::filesystem::exists(bad / "config.json")) << refused.out;
}

TEST(Cli, BadInputFailsWithAMessage) {
  Result r = run("make-checkpoint --preset nope --out /tmp/sparkdraft-never");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("nope"), std::string::npos) << r.out;
  r = run("demo --checkpoint /nonexistent/dir");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("/nonexistent/dir"), std::string::npos) << r.out;
  r = run("demo --backend tpu");
  EXPECT_NE(r.rc, 0);
  r = run("demo --tp 3");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("tp 3"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sparkdraft
