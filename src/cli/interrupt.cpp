// See interrupt.h.
#include "cli/interrupt.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "sparkdraft/error.h"

namespace sparkdraft::cli {
namespace {

constexpr int kSlots = 4;
constexpr int kFiles = 8;

struct Slot {
  std::atomic<bool> armed{false};
  bool taken = false;
  bool remove_dir = false;
  int files = 0;
  char file[kFiles][PATH_MAX];
  char dir[PATH_MAX];
};
Slot g_slots[kSlots];
std::atomic<bool> g_installed{false};

extern "C" void on_interrupt(int sig) {
  for (Slot& s : g_slots) {
    if (!s.armed.load(std::memory_order_acquire)) continue;
    for (int i = 0; i < s.files; ++i) ::unlink(s.file[i]);
    if (s.remove_dir) ::rmdir(s.dir);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

bool copy_path(char* dst, const std::string& src) {
  if (src.size() >= PATH_MAX) return false;
  std::memcpy(dst, src.c_str(), src.size() + 1);
  return true;
}

}  // namespace

RemoveOnInterrupt::RemoveOnInterrupt(const std::string& dir, const std::vector<std::string>& names,
                                     bool remove_dir) {
  if (!g_installed.exchange(true)) {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
  }
  for (int i = 0; i < kSlots && slot_ < 0; ++i)
    if (!g_slots[i].taken) slot_ = i;
  if (slot_ < 0 || static_cast<int>(names.size()) > kFiles)
    throw Error("RemoveOnInterrupt: more files or directories than it keeps");
  Slot& s = g_slots[slot_];
  s.taken = true;
  s.files = 0;
  bool ok = copy_path(s.dir, dir);
  for (const std::string& n : names) ok = ok && copy_path(s.file[s.files++], dir + "/" + n);
  s.remove_dir = remove_dir;
  if (!ok) {  // a path past PATH_MAX: nothing this process could have written there
    s.taken = false;
    slot_ = -1;
    return;
  }
  s.armed.store(true, std::memory_order_release);
}

RemoveOnInterrupt::~RemoveOnInterrupt() {
  if (slot_ < 0) return;
  g_slots[slot_].armed.store(false, std::memory_order_release);
  g_slots[slot_].taken = false;
}

}  // namespace sparkdraft::cli
