// Opening input files the safe way: regular files only (a FIFO would block a
// reader forever, a directory reads as an I/O error deep inside a stream), and
// every failure is a typed error naming the path and the reason.
#pragma once

#include <string>

namespace sparkdraft::io {

// Opens `path` read-only for a regular file and returns the descriptor, or
// throws E (CheckpointError / ConfigError) naming `what` and the path. The
// open itself never blocks (O_NONBLOCK), so a FIFO is refused, not waited on.
template <class E>
int open_regular_file(const std::string& path, const std::string& what);

// The whole content of a regular file (same refusals as open_regular_file).
template <class E>
std::string read_regular_file(const std::string& path, const std::string& what);

// What kind of thing `path` is, for messages: "a directory", "a FIFO", ...
std::string file_kind(unsigned mode);

// What a message quotes from an input (a name, a JSON value): at most `max`
// characters, cut with "..." and the full length, so that one bad entry of a
// file cannot make a message of megabytes.
std::string excerpt(const std::string& text, size_t max = 200);

}  // namespace sparkdraft::io
