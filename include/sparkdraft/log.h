// The library's only way to say something: a settable log sink. The library
// never prints (architecture.md, convention 5); it hands each message to the sink.
// The default sink writes "sparkdraft: <message>" and a newline to stderr;
// set_log_sink(nullptr) silences the library; a tool or a binding installs its own.
#pragma once

#include <functional>
#include <string>

namespace sparkdraft {

enum class LogLevel { debug, info, warning, error };

const char* log_level_name(LogLevel level);  // "debug", "info", "warning", "error"

// A sink takes a level and one message (no trailing newline). It may be called from
// any thread, but never from two at once (the library serializes calls); it must
// not call log_message() or log_once() itself.
using LogSink = std::function<void(LogLevel level, const std::string& message)>;

// Replaces the sink (thread safe); nullptr silences. Returns the previous sink.
LogSink set_log_sink(LogSink sink);

// The sink the library starts with: "sparkdraft: <message>\n" on stderr.
void default_log_sink(LogLevel level, const std::string& message);

// Hands the message to the current sink (nothing when silenced).
void log_message(LogLevel level, const std::string& message);

// Logs each distinct message once per process (thread safe); returns whether this
// call was the first with this message (true even when the sink is silenced).
bool log_once(LogLevel level, const std::string& message);

}  // namespace sparkdraft
