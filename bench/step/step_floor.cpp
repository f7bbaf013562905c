// The floor bytes and the matrix products of the draft step (step_floor.h).
#include "step/step_floor.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/layer_shard.h"

namespace sparkdraft::bench {
namespace {

void check_tp(const ModelConfig& c, int tp_size, const char* fn) {
  if (tp_size < 1 || c.draft_vocab() % tp_size != 0)
    throw std::invalid_argument(std::string(fn) + ": tp " + std::to_string(tp_size) +
                                " must be >= 1 and divide the (draft) vocabulary");
}

// The elements of one layer's matrices: QKV (+ g), o_proj, gate_up, down.
double layer_matrix_elements(const ModelConfig& c) {
  const double H = c.hidden_size, I = c.intermediate_size;
  const double q = static_cast<double>(c.num_heads) * c.head_dim,
               kv = static_cast<double>(c.num_kv_heads) * c.head_dim;
  const double qkv_rows = q + 2 * kv + (c.output_gate ? q : 0);
  return qkv_rows * H + H * q + 2 * I * H + H * I;
}

// The sum of value(part) over the parts, and the value of the part called `name`.
template <class Part, class Value>
double sum_parts(const std::vector<Part>& parts, Value value) {
  double sum = 0;
  for (const Part& p : parts) sum += value(p);
  return sum;
}
template <class Part, class Value>
double find_part(const std::vector<Part>& parts, std::string_view name, Value value,
                 const char* what) {
  for (const Part& p : parts)
    if (name == p.name) return value(p);
  throw std::out_of_range(std::string("no ") + what + " part " + std::string(name));
}
double bytes_of(const FloorPart& p) { return p.bytes; }
double flops_of(const FlopPart& p) { return p.flops; }

}  // namespace

StepFloorBytes step_floor_bytes(const ModelConfig& c, int rows, int ctx, int tp_size) {
  check_tp(c, tp_size, "step_floor_bytes");
  constexpr double kBf16 = 2, kF32 = 4;
  // The share of one GPU: the layer matrices and the KV cache where the layers
  // shard, the vocabulary always.
  const double layers_t = layer_tp_size(c, tp_size), vocab_t = tp_size;
  const double H = c.hidden_size, L = c.num_layers, hd = c.head_dim, V = c.vocab_size,
               N = c.block_size, R = rows;
  const double Vd = c.draft_vocab();  // lm_head, w2 and the base logits (contract.md section 11)
  const bool gains = c.norm_gain != NormGain::none;

  double layer = kBf16 * layer_matrix_elements(c) / layers_t;
  if (gains) {
    double norms = 2 * H;                                       // input, post-attention
    if (c.layer_style == LayerStyle::sandwich) norms += 2 * H;  // pre/post-feedforward
    if (c.qk_norm) norms += 2 * hd;
    if (c.o_norm && c.o_norm_weight) norms += hd;
    layer += kBf16 * norms;
  }
  if (c.residual_kind == ResidualKind::norm_preserving) layer += kF32 * 4 * H;  // alpha, beta x2

  // Positions each layer reads: the union of the block's queries' ranges (positions
  // ctx .. ctx+N-1, kv_len ctx+N): [lo of the first query, ctx + N).
  double positions = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    const double lo = a.window > 0 ? std::max(0.0, static_cast<double>(ctx) - a.window + 1) : 0.0;
    positions += static_cast<double>(ctx) + N - lo;
  }

  StepFloorBytes b;
  b.parts = {
      {"layer_weights", "layer weights", L * layer + (gains ? kBf16 * H : 0)},  // + final norm
      {"lm_head", "lm_head", kBf16 * Vd * H / vocab_t},
      {"kv_cache", "KV cache", kBf16 * R * positions * c.num_kv_heads * 2 * hd / layers_t},
      {"markov_w2", "w2 x N", kBf16 * Vd * c.markov_rank * N / vocab_t},
      {"base_logits", "base logits (write + read)",
       2 * kBf16 * R * N * Vd / vocab_t},  // written, then read
      {"draft_logits", "draft logits", kBf16 * R * N * V},
  };
  return b;
}

StepFloorFlops step_floor_flops(const ModelConfig& c, int rows, int ctx, int tp_size) {
  check_tp(c, tp_size, "step_floor_flops");
  const double layers_t = layer_tp_size(c, tp_size), vocab_t = tp_size;
  const double H = c.hidden_size, L = c.num_layers, hd = c.head_dim, N = c.block_size, R = rows,
               Vd = c.draft_vocab();
  const double T = R * N;
  const double layer = 2 * T * layer_matrix_elements(c) / layers_t;
  // Positions the block's queries read, query by query (query j at ctx + j, kv_len ctx + N).
  double reads = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    for (int j = 0; j < c.block_size; ++j) {
      const double pos = static_cast<double>(ctx) + j;
      const double hi = a.causal ? pos + 1 : static_cast<double>(ctx) + N;
      const double lo = a.window > 0 ? std::max(0.0, pos - a.window + 1) : 0.0;
      reads += std::max(0.0, hi - lo);
    }
  }
  StepFloorFlops f;
  f.parts = {
      {"projections", "layer_weights", L * layer},
      {"lm_head", "lm_head", 2 * T * Vd * H / vocab_t},
      {"attention", "kv_cache", 2 * 2 * hd * c.num_heads * R * reads / layers_t},
      {"markov", "markov_w2", 2 * R * N * c.markov_rank * Vd / vocab_t},
  };
  return f;
}

double StepFloorFlops::total() const { return sum_parts(parts, flops_of); }

double StepFloorFlops::at(std::string_view name) const {
  return find_part(parts, name, flops_of, "flop");
}

StepRoofline step_roofline(const StepFloorBytes& bytes, const StepFloorFlops& flops,
                           double bandwidth_gbs, double peak_tflops) {
  if (!(bandwidth_gbs > 0) || !(peak_tflops > 0))
    throw std::invalid_argument("step_roofline: bandwidth and peak must be > 0");
  for (const FlopPart& p : flops.parts) bytes.at(p.bytes_part);  // every product has its bytes
  StepRoofline r;
  r.bytes_us = bytes.total() / (bandwidth_gbs * 1e3);
  r.flops_us = flops.total() / (peak_tflops * 1e6);
  for (const FloorPart& b : bytes.parts) {
    double us = b.bytes / (bandwidth_gbs * 1e3);
    for (const FlopPart& p : flops.parts)
      if (std::string_view(p.bytes_part) == b.name)
        us = std::max(us, p.flops / (peak_tflops * 1e6));
    r.parts.emplace_back(b.name, us);
    r.floor_us += us;
  }
  return r;
}

double StepFloorBytes::total() const { return sum_parts(parts, bytes_of); }

double StepFloorBytes::at(std::string_view name) const {
  return find_part(parts, name, bytes_of, "floor");
}

}  // namespace sparkdraft::bench
