// The smallest embedding of sparkdraft: load a checkpoint, store the context
// of one request, draft N tokens, print them.
//
//   draft_example [CHECKPOINT_DIR]
//
// Without a directory it writes a tiny synthetic checkpoint to a temporary
// directory first. Errors are sparkdraft::Error subclasses with a message that
// names what is wrong; this program prints it and exits 1.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sparkdraft/checkpoint.h>
#include <sparkdraft/draft.h>
#include <sparkdraft/error.h>
#include <sparkdraft/version.h>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace sparkdraft;
  std::string dir = argc > 1 ? argv[1] : "";
  fs::path tmp;
  try {
    if (dir.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "sparkdraft-example-XXXXXX").string();
      if (!mkdtemp(tmpl.data())) throw IoError("cannot create a temporary directory");
      tmp = dir = tmpl;
      write_synthetic_checkpoint(preset_config("tiny"), dir, SyntheticOptions{});
    }
    // 1. Load (validates every tensor, refuses NaN/inf weights by default).
    auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir));
    const ModelConfig& c = ckpt->config();

    // 2. A backend sized for the calls it will see (validated here).
    DraftOptions o;
    o.max_reqs = 1;
    o.cache_slots = 1;
    o.threads = 2;
    std::unique_ptr<DraftBackend> draft = make_cpu_backend(ckpt, o);

    // 3. Store the context: T verified tokens of one request at positions
    //    0..T-1, their target hidden states, KV slots through page 0.. of the
    //    request's block table (identity pages here).
    const int T = 5;
    const int64_t width = static_cast<int64_t>(c.taps()) * c.target_hidden_size;
    std::vector<bf16> hidden(static_cast<size_t>(T * width));
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (bf16& h : hidden) h = to_bf16(normal(rng));
    std::vector<int64_t> positions(T), slots(T);
    for (int t = 0; t < T; ++t) positions[t] = slots[t] = t;
    draft->store_context({T, hidden.data(), positions.data(), slots.data()});

    // 4. Draft N tokens after the anchor (the target's last token) at position T.
    std::vector<int32_t> block_table(static_cast<size_t>(o.max_pages_per_req));
    for (int p = 0; p < o.max_pages_per_req; ++p) block_table[p] = p;
    const int64_t anchor = 7, anchor_pos = T, seed = 1234, cache_slot = 0;
    const float temperature = 1.0f;
    ProposeBatch b;
    b.num_rows = 1;
    b.anchor_tokens = &anchor;
    b.anchor_positions = &anchor_pos;
    b.seeds = &seed;
    b.temperatures = &temperature;
    b.cache_slots = &cache_slot;
    b.block_tables = block_table.data();
    std::vector<int64_t> tokens(static_cast<size_t>(c.block_size));
    std::vector<bf16> logits(static_cast<size_t>(o.cache_slots) * c.block_size * c.vocab_size);
    draft->propose(b, {tokens.data(), logits.data()});

    std::printf("sparkdraft %s, %s backend, V %d, N %d\n", SPARKDRAFT_VERSION_STRING,
                draft->name().c_str(), c.vocab_size, c.block_size);
    std::printf("draft:");
    for (int64_t t : tokens) std::printf(" %lld", static_cast<long long>(t));
    std::printf("\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "draft_example: %s\n", e.what());
    if (!tmp.empty()) fs::remove_all(tmp);
    return 1;
  }
  if (!tmp.empty()) fs::remove_all(tmp);
  return 0;
}
