// The per-row packet of the vocab-parallel Markov loop (contract.md section 6), one format
// for every backend (the CPU thread ranks, the GPU loopback and, later, NCCL): a
// shard's best score of the step, that score's global vocab id, and whether the
// score is NaN (then `id` is the shard's lowest NaN id). Shards hold increasing id
// ranges; every rank folds the shards' packets with the sampling rule
// (core/sampling.h `better`, associative), so all ranks pick the same token.
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/sampling.h"

namespace sparkdraft {

struct MarkovPacket {
  float value;
  int32_t id;
  int32_t nan;  // 1 when value is NaN
};
static_assert(sizeof(MarkovPacket) == 12);

SD_HD MarkovPacket make_packet(float value, int32_t id) {
  return MarkovPacket{value, id, value != value ? 1 : 0};
}

// True when packet a wins over packet b under the sampling rule.
SD_HD bool packet_wins(const MarkovPacket& a, const MarkovPacket& b) {
  const float va = a.nan ? bits_f32(0x7fffffffu) : a.value;
  const float vb = b.nan ? bits_f32(0x7fffffffu) : b.value;
  return better(va, a.id, vb, b.id);
}

}  // namespace sparkdraft
