// The settable log sink (sparkdraft/log.h): the default writes "sparkdraft: " lines to
// stderr, a set sink receives level and message, nullptr silences, and log_once hands
// each distinct message to the sink once, also when threads race for it.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sparkdraft/log.h"

namespace sparkdraft {
namespace {

struct Logged {
  LogLevel level;
  std::string message;
};

// Installs a capturing sink for the scope of a test, then puts the old one back.
class CaptureLog {
 public:
  CaptureLog() {
    previous_ = set_log_sink([this](LogLevel level, const std::string& message) {
      logged.push_back({level, message});
    });
  }
  ~CaptureLog() { set_log_sink(std::move(previous_)); }
  CaptureLog(const CaptureLog&) = delete;
  CaptureLog& operator=(const CaptureLog&) = delete;
  std::vector<Logged> logged;

 private:
  LogSink previous_;
};

// A message no other test (or earlier run of log_once) has seen.
std::string unique(const std::string& what) {
  static std::atomic<int> counter{0};
  return "test_log: " + what + " " + std::to_string(std::random_device{}()) + "." +
         std::to_string(counter++);
}

TEST(Log, DefaultSinkWritesPrefixedLineToStderr) {
  const LogSink previous = set_log_sink(default_log_sink);
  ::testing::internal::CaptureStderr();
  log_message(LogLevel::warning, "hello from the sink test");
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_sink(previous);
  EXPECT_EQ(err, "sparkdraft: hello from the sink test\n");
}

TEST(Log, SetSinkReceivesLevelAndMessage) {
  CaptureLog capture;
  log_message(LogLevel::info, "one");
  log_message(LogLevel::error, "two");
  ASSERT_EQ(capture.logged.size(), 2u);
  EXPECT_EQ(capture.logged[0].level, LogLevel::info);
  EXPECT_EQ(capture.logged[0].message, "one");
  EXPECT_EQ(capture.logged[1].level, LogLevel::error);
  EXPECT_EQ(capture.logged[1].message, "two");
}

TEST(Log, NullSinkSilences) {
  const LogSink previous = set_log_sink(nullptr);
  ::testing::internal::CaptureStderr();
  log_message(LogLevel::error, "not printed");
  const std::string message = unique("silenced");
  EXPECT_TRUE(log_once(LogLevel::info, message));  // seen, though nothing is written
  EXPECT_FALSE(log_once(LogLevel::info, message));
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_sink(previous);
  EXPECT_EQ(err, "");
}

TEST(Log, LogOnceLogsEachDistinctMessageOnce) {
  CaptureLog capture;
  const std::string a = unique("a"), b = unique("b");
  EXPECT_TRUE(log_once(LogLevel::info, a));
  EXPECT_FALSE(log_once(LogLevel::info, a));
  EXPECT_TRUE(log_once(LogLevel::warning, b));
  EXPECT_FALSE(log_once(LogLevel::warning, a));
  ASSERT_EQ(capture.logged.size(), 2u);
  EXPECT_EQ(capture.logged[0].message, a);
  EXPECT_EQ(capture.logged[1].message, b);
  EXPECT_EQ(capture.logged[1].level, LogLevel::warning);
}

TEST(Log, LogOnceIsThreadSafe) {
  CaptureLog capture;
  const std::string message = unique("raced");
  std::atomic<int> firsts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) firsts += log_once(LogLevel::info, message) ? 1 : 0;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(firsts.load(), 1);
  ASSERT_EQ(capture.logged.size(), 1u);
  EXPECT_EQ(capture.logged[0].message, message);
}

TEST(Log, LevelNames) {
  EXPECT_STREQ(log_level_name(LogLevel::debug), "debug");
  EXPECT_STREQ(log_level_name(LogLevel::info), "info");
  EXPECT_STREQ(log_level_name(LogLevel::warning), "warning");
  EXPECT_STREQ(log_level_name(LogLevel::error), "error");
}

}  // namespace
}  // namespace sparkdraft
