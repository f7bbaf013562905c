// See file_util.h.
#include "io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sparkdraft/error.h"

namespace sparkdraft::io {

std::string file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "not a regular file";
  }
}

std::string excerpt(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return text.substr(0, max) + "... (" + std::to_string(text.size()) + " characters)";
}

template <class E>
int open_regular_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw E("cannot open " + what + " '" + path + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw E("cannot stat " + what + " '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw E(what + " '" + path + "' is " + file_kind(st.st_mode) + ", not a regular file");
  }
  // Back to blocking reads (irrelevant for regular files, but explicit).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

template <class E>
std::string read_regular_file(const std::string& path, const std::string& what) {
  const int fd = open_regular_file<E>(path, what);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw E("cannot read " + what + " '" + path + "': " + std::strerror(err));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

template int open_regular_file<CheckpointError>(const std::string&, const std::string&);
template int open_regular_file<ConfigError>(const std::string&, const std::string&);
template std::string read_regular_file<CheckpointError>(const std::string&, const std::string&);
template std::string read_regular_file<ConfigError>(const std::string&, const std::string&);

}  // namespace sparkdraft::io
