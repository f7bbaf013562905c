// The GPU backend's captured steps: one executable graph per row count for the host API
// (captured at the first call of that row count), and one per row count for the device
// API's bind-once form (propose_device_graphed), kept with the pointers it was captured on
// and replayed only with those. Plain C++ over the graph type (cuda/common/graph.h's
// GraphExec in the backend), so the bookkeeping is tested without a GPU.
#pragma once

#include <array>
#include <map>
#include <utility>

namespace sparkdraft::cuda {

template <class Exec>
class GraphCache {
 public:
  // The pointers a bound graph was captured on: the batch's arrays (lengths included, null
  // or not) and the outputs (draft tokens, draft logits, confidences).
  using Pointers = std::array<const void*, 10>;

  // The host API's graph for `rows` (with or without per-request lengths), or null.
  Exec* find(int rows, bool lengths = false) {
    auto it = by_rows_.find({rows, lengths});
    return it == by_rows_.end() ? nullptr : &it->second;
  }
  Exec& put(int rows, bool lengths, Exec exec) {
    return by_rows_.insert_or_assign({rows, lengths}, std::move(exec)).first->second;
  }

  // The bound graph for `rows` when it was captured on `pointers`, else null.
  Exec* find_bound(int rows, const Pointers& pointers) {
    auto it = bound_.find(rows);
    return it == bound_.end() || it->second.first != pointers ? nullptr : &it->second.second;
  }
  // Replaces the row count's bound graph.
  Exec& put_bound(int rows, const Pointers& pointers, Exec exec) {
    auto& slot = bound_[rows];
    slot = {pointers, std::move(exec)};
    return slot.second;
  }

  size_t size() const { return by_rows_.size(); }
  size_t bound_size() const { return bound_.size(); }
  void clear() {
    by_rows_.clear();
    bound_.clear();
  }

 private:
  std::map<std::pair<int, bool>, Exec> by_rows_;
  std::map<int, std::pair<Pointers, Exec>> bound_;
};

}  // namespace sparkdraft::cuda
