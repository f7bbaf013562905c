// The settable log sink (sparkdraft/log.h).
#include "sparkdraft/log.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

namespace sparkdraft {
namespace {

struct LogState {
  std::mutex mutex;  // guards sink and serializes calls to it
  LogSink sink = default_log_sink;
  std::mutex seen_mutex;
  std::set<std::string> seen;
};

LogState& state() {
  static LogState s;
  return s;
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "unknown";
}

LogSink set_log_sink(LogSink sink) {
  LogState& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  return std::exchange(s.sink, std::move(sink));
}

void default_log_sink(LogLevel, const std::string& message) {
  std::fprintf(stderr, "sparkdraft: %s\n", message.c_str());
  std::fflush(stderr);
}

void log_message(LogLevel level, const std::string& message) {
  LogState& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  if (s.sink) s.sink(level, message);
}

bool log_once(LogLevel level, const std::string& message) {
  LogState& s = state();
  {
    const std::lock_guard<std::mutex> lock(s.seen_mutex);
    if (!s.seen.insert(message).second) return false;
  }
  log_message(level, message);
  return true;
}

}  // namespace sparkdraft
