// A seeded mutation fuzzer of the parsers that read untrusted files: the
// safetensors reader, the config loader (our JSON and the HF config.json) and
// the whole checkpoint loader. Each iteration mutates a valid input (bit flips,
// byte edits, insertions, deletions, truncation, numbers swapped for edge
// values, the header size replaced) and feeds it to the parser; the parser
// must either accept it (and then what it returns must hold up) or throw a
// sparkdraft::Error. Anything else (another exception type, a crash, an ASan
// or UBSan report) is a failure.
//
// Settings: fuzz/fuzz_env.h (SPARKDRAFT_FUZZ_SECONDS, _SEED, _ITER).
//
// A failing input is written to the temporary directory and its path printed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/files.h"
#include "fuzz/fuzz_env.h"
#include "io/hf_config.h"
#include "io/poke.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/config.h"
#include "sparkdraft/error.h"
#include "sparkdraft/safetensors.h"

namespace sparkdraft {
namespace {

namespace fs = std::filesystem;

const char* const kNumbers[] = {"-1",
                                "0",
                                "1",
                                "18446744073709551615",
                                "18446744073709551616",
                                "9223372036854775807",
                                "-9223372036854775808",
                                "4294967296",
                                "1e309",
                                "-0",
                                "0.5",
                                "nan",
                                "1e-50",
                                "65536",
                                "2147483648",
                                "99999999999999999999"};
const char kBytes[] = {'\0', '\xff', '"', '{', '}',  '[', ']', ',',
                       ':',  '-',    '9', ' ', '\\', 'e', '.'};

// One to four random edits of `s`.
std::string mutate(std::string s, std::mt19937_64& rng, bool header_size_field) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 9) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[pick(s.size())] = kBytes[pick(sizeof kBytes)];
        break;
      case 2:
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
      case 3: {  // insert
        std::string ins(1 + pick(8), '\0');
        for (char& c : ins) c = rng() % 2 ? kBytes[pick(sizeof kBytes)] : static_cast<char>(rng());
        s.insert(pick(s.size() + 1), ins);
        break;
      }
      case 4:  // delete a range
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(32, s.size() - at)));
        }
        break;
      case 5:  // duplicate a range
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.insert(pick(s.size() + 1), s.substr(at, 1 + pick(64)));
        }
        break;
      case 6:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 7: {  // a run of digits becomes an edge value
        std::vector<size_t> starts;
        for (size_t i = 0; i < s.size(); ++i)
          if (std::isdigit(static_cast<unsigned char>(s[i])) &&
              (i == 0 || !std::isdigit(static_cast<unsigned char>(s[i - 1]))))
            starts.push_back(i);
        if (starts.empty()) break;
        const size_t at = starts[pick(starts.size())];
        size_t end = at;
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        s.replace(at, end - at, kNumbers[pick(std::size(kNumbers))]);
        break;
      }
      case 8:  // the safetensors header size
        if (header_size_field && s.size() >= 8) {
          uint64_t n =
              rng() % 3 == 0 ? rng() : (s.size() - 8) + (static_cast<int64_t>(rng() % 17) - 8);
          for (int i = 0; i < 8; ++i)
            s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
        }
        break;
    }
  }
  return s;
}

struct Target {
  std::string name;
  std::vector<std::string> seeds;  // valid inputs
  bool header_size_field;
  // Parses `path` (the mutated input is written there); throws on refusal.
  std::function<void(const std::string& path)> parse;
};

void fuzz(const Target& t, const std::string& path) {
  const test::FuzzSettings fs_;
  int64_t accepted = 0;
  bool failed = false;
  const int64_t iters = test::fuzz_loop(fs_, [&](int64_t i) {
    std::mt19937_64 rng = test::fuzz_rng(fs_, i, t.name);
    const std::string input = mutate(t.seeds[rng() % t.seeds.size()], rng, t.header_size_field);
    test::write_file(path, input);
    std::string failure;
    try {
      t.parse(path);
      ++accepted;
    } catch (const Error&) {
      // refused with a typed error: what the parser must do
    } catch (const std::exception& e) {
      failure = std::string("threw a non-sparkdraft exception: ") + e.what();
    } catch (...) {
      failure = "threw a non-exception";
    }
    if (failure.empty()) return true;
    const std::string keep =
        (fs::temp_directory_path() /
         ("sparkdraft-fuzz-" + t.name + "-" + std::to_string(fs_.seed) + "-" + std::to_string(i)))
            .string();
    test::write_file(keep, input);
    ADD_FAILURE() << t.name << ": " << failure << "\n  reproduce: SPARKDRAFT_FUZZ_SEED=" << fs_.seed
                  << " SPARKDRAFT_FUZZ_ITER=" << i << "\n  input kept in " << keep;
    failed = true;
    return false;
  });
  if (failed) return;
  std::printf("fuzz %s: %lld inputs in %.1f s (seed %llu), %lld accepted\n", t.name.c_str(),
              static_cast<long long>(iters), fs_.seconds, static_cast<unsigned long long>(fs_.seed),
              static_cast<long long>(accepted));
  EXPECT_GT(iters, 0);
}

TEST(Fuzz, SafetensorsReader) {
  test::TempDir dir;
  SafetensorsWriter w;
  const std::vector<uint8_t> bytes(64, 0x3c);
  w.add_copy("a.weight", DType::f32, {2, 3}, bytes.data());
  w.add_copy("b.weight", DType::bf16, {5}, bytes.data());
  w.add_copy("c", DType::u8, {0}, nullptr);
  w.add_copy("layers.0.d", DType::i64, {1, 1, 2}, bytes.data());
  w.set_metadata("format", "pt");
  w.write(dir / "seed.safetensors");
  Target t{
      "safetensors", {test::read_file(dir / "seed.safetensors")}, true, [](const std::string& p) {
        auto f = SafetensorsFile::open(p);
        // Accepted: every tensor's bytes are readable and sized as declared.
        for (const auto& [name, info] : f->tensors()) {
          ASSERT_EQ(info.nbytes, static_cast<size_t>(info.numel()) * dtype_size(info.dtype))
              << name;
          volatile uint8_t sink = 0;
          for (size_t i = 0; i < info.nbytes; ++i) sink = sink ^ info.data[i];
        }
      }};
  fuzz(t, dir / "input.safetensors");
}

TEST(Fuzz, ConfigLoader) {
  test::TempDir dir;
  const std::string ours = config_to_json(preset_config("tiny", "muse")).dump(2);
  const std::string hf = io::export_hf_config(preset_config("tiny")).dump(2);
  // The speculators form (contract.md section 14), fill-in layout.
  const std::string spec = io::export_speculators_config(preset_config("tiny-fillin")).dump(2);
  Target t{"config", {ours, hf, spec}, false, [](const std::string& p) {
             const ModelConfig c = load_config_file(p);
             // Accepted: a valid config that round-trips through our JSON.
             c.validate();
             EXPECT_EQ(config_to_json(config_from_json(config_to_json(c))), config_to_json(c));
           }};
  fuzz(t, dir / "config.json");
}

TEST(Fuzz, CheckpointLoader) {
  // The whole loader on a tiny checkpoint whose config.json or safetensors
  // header is mutated (the data section is left alone: it is large and the
  // header decides what is read).
  test::TempDir dir;
  SyntheticOptions so;
  write_synthetic_checkpoint(preset_config("tiny"), dir / "ck", so);
  const std::string st = test::read_file(dir / "ck/model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(st[static_cast<size_t>(i)]);
  const std::string head = st.substr(0, 8 + n), data = st.substr(8 + n);
  const std::string config = test::read_file(dir / "ck/config.json");
  const std::string ck = dir / "ck";
  Target t{"checkpoint",
           {"C" + config, "S" + head},
           false,
           [ck, head, data, config](const std::string& p) {
             const std::string in = test::read_file(p);
             const bool is_config = !in.empty() && in[0] == 'C';
             test::write_file(ck + "/config.json", is_config ? in.substr(1) : config);
             test::write_file(
                 ck + "/model.safetensors",
                 is_config ? head + data : in.substr(std::min<size_t>(1, in.size())) + data);
             const Checkpoint c = Checkpoint::load(ck);
             EXPECT_NE(c.weights().lm_head, nullptr);
           }};
  fuzz(t, dir / "input");
}

}  // namespace
}  // namespace sparkdraft
