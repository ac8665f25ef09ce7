// engine/cli/temp_cleanup.cpp — see temp_cleanup.h.
#include "engine/cli/temp_cleanup.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ds4::cli {
namespace {

constexpr int kSlots = 8;
constexpr size_t kPathMax = 4096;

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 armed
  bool is_dir = false;
  char path[kPathMax] = {};
};
Slot g_slots[kSlots];
std::once_flag g_installed;

/// Removes the plain entries of folder `dir` (one level), then the folder. Async-signal-safe.
void remove_dir_signal_safe(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[].
        unsigned short reclen;
        std::memcpy(&reclen, buf + off + 16, sizeof reclen);
        const char* name = buf + off + 19;
        if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) ::unlinkat(fd, name, 0);
        off += reclen;
      }
    }
    ::close(fd);
  }
  ::rmdir(dir);
}

void on_signal(int sig) {
  for (int i = kSlots - 1; i >= 0; --i) {
    if (g_slots[i].state.load() != 2) continue;
    if (g_slots[i].is_dir)
      remove_dir_signal_safe(g_slots[i].path);
    else
      ::unlink(g_slots[i].path);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install() {
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // e.g. started with nohup/&: keep ignoring
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

int temp_cleanup_add(const std::string& path, bool is_dir) {
  if (path.size() >= kPathMax) return -1;
  std::call_once(g_installed, install);
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    g_slots[i].is_dir = is_dir;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2);
    return i;
  }
  return -1;
}

void temp_cleanup_remove(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0);
}

}  // namespace ds4::cli
