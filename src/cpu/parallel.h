// Splits [0, n) into `threads` contiguous, nearly equal ranges and runs
// fn(begin, end) on each, one std::thread per range (the caller runs the
// first); with threads <= 1 (or n <= 1) fn(0, n) runs inline. The ops give
// every index the same arithmetic whatever range it falls in, so results never
// depend on the thread count. An exception thrown by fn is rethrown here after
// every worker has joined (the lowest range's first).
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace sparkdraft::cpu {

template <class Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (n <= 0) return;
  const int64_t parts = std::min<int64_t>(std::max(threads, 1), n);
  if (parts == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  auto run = [&](int64_t part) {
    try {
      fn(n * part / parts, n * (part + 1) / parts);
    } catch (...) {
      errors[static_cast<size_t>(part)] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(parts - 1));
  try {
    for (int64_t part = 1; part < parts; ++part) workers.emplace_back(run, part);
  } catch (...) {
    for (auto& w : workers) w.join();
    throw;
  }
  run(0);
  for (auto& w : workers) w.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace sparkdraft::cpu
