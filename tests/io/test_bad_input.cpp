// Bad input to the loaders, each refused with an error naming the thing at
// fault: NaN/inf weights (unless allowed), duplicate tensor names, trailing
// bytes, anything but a regular file where a file is read (directory, FIFO,
// symlink loop), a checkpoint path that is a file; and the writer's
// zero-element tensor from a null pointer.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>

#include "common/errors.h"
#include "common/files.h"
#include "io/poke.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/safetensors.h"

namespace sparkdraft {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_mentions;

std::string header_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

// Runs f on another thread and fails (rather than hanging the suite) when it
// takes longer than `seconds`; returns f's error message.
template <class E, class F>
std::string refused_within(double seconds, F f) {
  auto fut = std::async(std::launch::async, [f] { return error_of<E>(f); });
  if (fut.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "still blocked after " << seconds << " s";
    std::_Exit(1);  // the blocked thread cannot be cancelled
  }
  return fut.get();
}

void tiny_checkpoint(const std::string& dir, const std::string& style = "qwen3") {
  SyntheticOptions so;
  so.seed = 5;
  write_synthetic_checkpoint(preset_config("tiny", style), dir, so);
}

TEST(BadInput, DuplicateTensorNameIsRefused) {
  test::TempDir dir;
  const std::string h =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})";
  test::write_file(dir / "dup.safetensors", header_file(h, "abcd"));
  expect_mentions(
      error_of<CheckpointError>([&] { SafetensorsFile::open(dir / "dup.safetensors"); }),
      {dir / "dup.safetensors", "'a'", "twice"});
  // A nested repeated key (inside one tensor's entry) is not a tensor name: the
  // entry is still checked as a whole (here: valid, the last dtype wins in JSON).
  const std::string ok = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  test::write_file(dir / "ok.safetensors", header_file(ok, "ab"));
  EXPECT_NE(SafetensorsFile::open(dir / "ok.safetensors")->find("a"), nullptr);
}

TEST(BadInput, TrailingBytesAreRefused) {
  test::TempDir dir;
  const std::string h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  test::write_file(dir / "tail.safetensors", header_file(h, "abXYZ"));
  expect_mentions(
      error_of<CheckpointError>([&] { SafetensorsFile::open(dir / "tail.safetensors"); }),
      {dir / "tail.safetensors", "3 trailing bytes"});
  test::write_file(dir / "empty.safetensors", header_file("{}", "x"));
  expect_mentions(
      error_of<CheckpointError>([&] { SafetensorsFile::open(dir / "empty.safetensors"); }),
      {"1 trailing bytes"});
  test::write_file(dir / "exact.safetensors", header_file(h, "ab"));
  EXPECT_EQ(SafetensorsFile::open(dir / "exact.safetensors")->tensors().size(), 1u);
}

TEST(BadInput, SafetensorsMustBeARegularFile) {
  test::TempDir dir;
  fs::create_directory(dir / "d.safetensors");
  expect_mentions(error_of<CheckpointError>([&] { SafetensorsFile::open(dir / "d.safetensors"); }),
                  {dir / "d.safetensors", "a directory", "not a regular file"});
  ASSERT_EQ(::mkfifo((dir / "f.safetensors").c_str(), 0600), 0) << std::strerror(errno);
  const std::string fifo = dir / "f.safetensors";
  expect_mentions(refused_within<CheckpointError>(10, [fifo] { SafetensorsFile::open(fifo); }),
                  {fifo, "a FIFO"});
  fs::create_symlink("loop.safetensors", dir / "loop.safetensors");
  expect_mentions(
      error_of<CheckpointError>([&] { SafetensorsFile::open(dir / "loop.safetensors"); }),
      {dir / "loop.safetensors", "symbolic links"});
}

TEST(BadInput, CheckpointPathsThatAreNotWhatTheySeem) {
  test::TempDir dir;
  test::write_file(dir / "file", "x");
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir / "file"); }),
                  {dir / "file", "is not a directory"});
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(""); }), {"empty"});

  // config.json a directory, a symlink loop, a FIFO.
  const std::string ck = dir / "ck";
  tiny_checkpoint(ck);
  fs::remove(ck + "/config.json");
  fs::create_directory(ck + "/config.json");
  expect_mentions(error_of<ConfigError>([&] { Checkpoint::load(ck); }),
                  {ck + "/config.json", "a directory"});
  fs::remove(ck + "/config.json");
  fs::create_symlink("config.json", ck + "/config.json");
  expect_mentions(error_of<ConfigError>([&] { Checkpoint::load(ck); }),
                  {ck + "/config.json", "symbolic links"});
  fs::remove(ck + "/config.json");
  ASSERT_EQ(::mkfifo((ck + "/config.json").c_str(), 0600), 0);
  expect_mentions(refused_within<ConfigError>(10, [ck] { Checkpoint::load(ck); }), {"a FIFO"});

  // model.safetensors a FIFO or a symlink loop (the config is fine again).
  const std::string ck2 = dir / "ck2";
  tiny_checkpoint(ck2);
  fs::remove(ck2 + "/model.safetensors");
  ASSERT_EQ(::mkfifo((ck2 + "/model.safetensors").c_str(), 0600), 0);
  expect_mentions(refused_within<CheckpointError>(10, [ck2] { Checkpoint::load(ck2); }),
                  {ck2 + "/model.safetensors", "a FIFO"});
  fs::remove(ck2 + "/model.safetensors");
  fs::create_symlink("model.safetensors", ck2 + "/model.safetensors");
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(ck2); }),
                  {ck2 + "/model.safetensors", "symbolic links"});
}

TEST(BadInput, ConfigFileMustBeARegularFile) {
  test::TempDir dir;
  fs::create_directory(dir / "c.json");
  expect_mentions(error_of<ConfigError>([&] { load_config_file(dir / "c.json"); }),
                  {dir / "c.json", "a directory"});
}

struct Poke {
  std::string tensor;
  int64_t index;
  bool f32;
  uint32_t bits;
  std::string what;
};

TEST(BadInput, NonFiniteWeightsAreRefusedWithTensorAndIndex) {
  // tiny: V 1000, H 64; lm_head index 64*7+3 = row 7, column 3.
  const std::vector<Poke> pokes = {
      {"lm_head.weight", 7 * 64 + 3, false, 0x7fc0, "NaN"},
      {"embed_tokens.weight", 0, false, 0x7f80, "+inf"},
      {"markov_head.markov_w2.weight", 999 * 64 + 63, false, 0xff80, "-inf"},  // the last element
      {"layers.1.mlp.down_proj.weight", 1234, false, 0xffc1, "NaN"},           // [64, 160]
      {"layers.0.attn_residual.alpha", 17, true, 0x7f800001u, "NaN"},          // muse: fp32 tensor
      {"layers.1.self_attn.k_proj.weight", 100, false, 0x7f80, "+inf"},        // a packed piece
  };
  for (const Poke& p : pokes) {
    SCOPED_TRACE(p.tensor);
    test::TempDir dir;
    tiny_checkpoint(dir.path(), p.f32 ? "muse" : "qwen3");
    const std::string st = dir / "model.safetensors";
    if (p.f32) {
      test::poke_tensor(st, p.tensor, p.index, &p.bits, 4);
    } else {
      const uint16_t b = static_cast<uint16_t>(p.bits);
      test::poke_tensor(st, p.tensor, p.index, &b, 2);
    }
    for (int threads : {1, 3}) {
      LoadOptions lo;
      lo.threads = threads;
      const std::string msg = error_of<NonFiniteWeights>([&] { Checkpoint::load(dir.path(), lo); });
      expect_mentions(msg, {"'" + p.tensor + "'", st, p.what, "index " + std::to_string(p.index),
                            "--allow-nonfinite-weights"});
    }
    // Deferred to the backend: the CPU backend refuses with the same message.
    LoadOptions lo;
    const std::string msg = error_of<NonFiniteWeights>([&] { Checkpoint::load(dir.path(), lo); });
    lo.defer_nonfinite_scan = true;
    auto deferred = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path(), lo));
    EXPECT_TRUE(deferred->nonfinite_scan_pending());
    EXPECT_EQ(error_of<NonFiniteWeights>([&] { make_cpu_backend(deferred, DraftOptions{}); }), msg);
    LoadOptions allow;
    allow.allow_nonfinite = true;
    EXPECT_NO_THROW(Checkpoint::load(dir.path(), allow));
    allow.defer_nonfinite_scan = true;
    EXPECT_FALSE(Checkpoint::load(dir.path(), allow).nonfinite_scan_pending());
  }
}

TEST(BadInput, FirstNonFiniteIndexIsReportedWhateverTheThreads) {
  // Two bad values in one large tensor, in different scan blocks: the lower
  // index is named for every thread count.
  test::TempDir dir;
  tiny_checkpoint(dir.path());
  const std::string st = dir / "model.safetensors";
  const uint16_t nan = 0x7fc0;
  test::poke_tensor(st, "lm_head.weight", 63000, &nan, 2);
  test::poke_tensor(st, "lm_head.weight", 5000, &nan, 2);
  for (int threads : {1, 2, 4, 16}) {
    LoadOptions lo;
    lo.threads = threads;
    expect_mentions(error_of<NonFiniteWeights>([&] { Checkpoint::load(dir.path(), lo); }),
                    {"index 5000 [78, 8]"});
  }
}

TEST(BadInput, WriterCopiesAZeroElementTensorFromNull) {
  test::TempDir dir;
  SafetensorsWriter w;
  w.add_copy("empty", DType::f32, {0, 4}, nullptr);
  const float x[2] = {1.0f, 2.0f};
  w.add_copy("x", DType::f32, {2}, x);
  w.write(dir / "z.safetensors");
  auto f = SafetensorsFile::open(dir / "z.safetensors");
  ASSERT_NE(f->find("empty"), nullptr);
  EXPECT_EQ(f->find("empty")->nbytes, 0u);
  expect_mentions(error_of<InvalidArgument>([&] { w.add_copy("y", DType::f32, {2}, nullptr); }),
                  {"'y'", "no data"});
}

TEST(BadInput, FailedSyntheticWriteLeavesNothing) {
  test::TempDir dir;
  // The output's parent is a file: nothing can be created, nothing is left.
  test::write_file(dir / "file", "x");
  SyntheticOptions so;
  expect_mentions(error_of<IoError>([&] {
                    write_synthetic_checkpoint(preset_config("tiny"), dir / "file/ck", so);
                  }),
                  {"file/ck"});
  // The safetensors write fails (a directory in its temporary name's place):
  // the config.json written before it is removed again.
  fs::create_directories(dir / "ck/model.safetensors.tmp");
  EXPECT_THROW(write_synthetic_checkpoint(preset_config("tiny"), dir / "ck", so), IoError);
  EXPECT_FALSE(fs::exists(dir / "ck/config.json"));
}

}  // namespace
}  // namespace sparkdraft
