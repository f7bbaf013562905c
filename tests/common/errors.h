// Checks that an error was thrown, of the right type, with a message naming what is
// at fault.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

namespace sparkdraft::test {

// Runs f, expects it to throw E, and returns the message ("" after a failure).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// Every needle must appear in the message.
inline void expect_mentions(const std::string& message, const std::vector<std::string>& needles) {
  for (const std::string& n : needles)
    EXPECT_NE(message.find(n), std::string::npos) << "message lacks \"" << n << "\": " << message;
}

}  // namespace sparkdraft::test
