// The exact top-k of the top-k Markov loop (contract.md section 12), host and device.
//
// The candidate set of a position is the k best (value, id) pairs of its base logits under
// the sampling rule's preference (`better` in core/sampling.h: NaN first with the lower id,
// then the larger value, ties (+0 and -0 included) to the lower id). `better` is a strict
// total order on pairs with distinct ids, so the set and its order are unique: a top-k of
// any partition (per thread, per block, per vocabulary shard) followed by a merge of the
// partial lists gives the same list, whatever the merge order.
//
// A list holds `count` <= k entries sorted best first; an empty entry has id -1.
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/sampling.h"

namespace sparkdraft {

struct TopkEntry {
  float value;  // f32 of the bf16 base logit (exact; a NaN is any NaN)
  int32_t id;   // global vocabulary id; -1 = empty
};
static_assert(sizeof(TopkEntry) == 8);

// True when a comes before b in a candidate list (an empty entry comes last).
SD_HD bool topk_before(const TopkEntry& a, const TopkEntry& b) {
  if (a.id < 0 || b.id < 0) return b.id < 0 && a.id >= 0;
  return better(a.value, a.id, b.value, b.id);
}

// Inserts x into the sorted list (count entries, capacity k): kept when the list is not
// full or x comes before its last entry (which then drops out). Returns the new count.
SD_HD int topk_insert(TopkEntry* list, int count, int k, TopkEntry x) {
  if (x.id < 0) return count;
  if (count == k) {
    if (k == 0 || !topk_before(x, list[k - 1])) return count;
    --count;  // the last entry drops out
  }
  int i = count;
  while (i > 0 && topk_before(x, list[i - 1])) {
    list[i] = list[i - 1];
    --i;
  }
  list[i] = x;
  return count + 1;
}

// The top-k of n bf16 values whose ids are id_offset + i: writes min(k, n) entries to
// out (best first) and returns that count. Host reference; the kernels run the same
// insert per thread, then merge.
inline int topk_of_row(const bf16* row, int n, int32_t id_offset, int k, TopkEntry* out) {
  int count = 0;
  for (int i = 0; i < n; ++i)
    count = topk_insert(out, count, k, TopkEntry{to_f32(row[i]), id_offset + i});
  return count;
}

// Merges sorted list b (nb entries) into sorted list a (na entries, capacity k).
SD_HD int topk_merge(TopkEntry* a, int na, int k, const TopkEntry* b, int nb) {
  for (int i = 0; i < nb; ++i) na = topk_insert(a, na, k, b[i]);
  return na;
}

}  // namespace sparkdraft
