// common/ds4/mapped_files.h — the read-only file mappings the process holds (the GGUF and
// safetensors readers register theirs), and a SIGBUS report that names the file.
//
// A page of a shared or private file mapping that lies past the file's end (the file was cut or
// rewritten shorter after it was mapped) or whose storage fails to read raises SIGBUS on access,
// which by default kills the process without a word (llama.cpp behaves the same). With the report
// installed (the ds4-offload program does, at start), the process instead prints one error naming
// the file and the offset and exits with `exit_code`. The registry and the handler use only
// lock-free atomics, a fixed table and write(2): async-signal-safe. A SIGBUS outside every
// registered mapping gets the default action (the handler resets it and returns, so the fault
// repeats and kills the process as before).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ds4::mapped_files {

/// One registered mapping: [begin, end) and the file's path (cut to kPathBytes - 1 bytes).
struct Entry {
  static constexpr size_t kPathBytes = 512;
  std::atomic<uintptr_t> begin{0}, end{0};  ///< end == 0: a free slot
  std::atomic<bool> claimed{false};
  char path[kPathBytes] = {};
};
/// The table (a process holds a few mappings: one per model shard; more are not named).
inline Entry g_entries[64];
/// The program name and exit code of the report (install_sigbus_report).
inline char g_program[64] = "ds4-offload";
inline int g_exit_code = 1;

/// Registers the mapping [addr, addr + bytes) of file `path`. Without a free slot the mapping is
/// not registered (a SIGBUS there is then not named). Thread-safe.
inline void add(const void* addr, uint64_t bytes, const std::string& path) {
  if (addr == nullptr || bytes == 0) return;
  for (Entry& e : g_entries) {
    bool f = false;
    if (!e.claimed.compare_exchange_strong(f, true)) continue;
    const size_t n = std::min(path.size(), Entry::kPathBytes - 1);
    std::memcpy(e.path, path.data(), n);
    e.path[n] = '\0';
    e.begin.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_relaxed);
    e.end.store(reinterpret_cast<uintptr_t>(addr) + bytes, std::memory_order_release);
    return;
  }
}

/// Unregisters the mapping that starts at `addr` (before it is unmapped). Thread-safe.
inline void remove(const void* addr) {
  for (Entry& e : g_entries)
    if (e.end.load(std::memory_order_acquire) != 0 && e.begin.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(addr)) {
      e.end.store(0, std::memory_order_release);
      e.begin.store(0, std::memory_order_relaxed);
      e.claimed.store(false, std::memory_order_release);
      return;
    }
}

namespace detail {
inline void put(const char* s) {
  for (size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}
inline void put_u64(uint64_t v) {
  char b[24];
  int i = 23;
  b[i] = '\0';
  do {
    b[--i] = char('0' + v % 10);
    v /= 10;
  } while (v != 0 && i > 0);
  put(b + i);
}
inline void on_sigbus(int sig, siginfo_t* info, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (const Entry& e : g_entries) {
    const uintptr_t b = e.begin.load(std::memory_order_relaxed), x = e.end.load(std::memory_order_acquire);
    if (x == 0 || a < b || a >= x) continue;
    put(g_program);
    put(": error: bus error reading the memory-mapped file ");
    put(e.path);
    put(" at byte ");
    put_u64(a - b);
    put(": expected the file unchanged while it is loaded, found it cut or rewritten since (or its storage failed)\n");
    ::_exit(g_exit_code);
  }
  signal(sig, SIG_DFL);  // not a registered mapping: the default action when the access repeats
}
}  // namespace detail

/// Installs the SIGBUS report: `program` prefixes the message, `exit_code` is the exit status.
/// Returns false when sigaction fails.
inline bool install_sigbus_report(const char* program, int exit_code) {
  std::strncpy(g_program, program, sizeof g_program - 1);
  g_exit_code = exit_code;
  struct sigaction sa {};
  sa.sa_sigaction = detail::on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGBUS, &sa, nullptr) == 0;
}

}  // namespace ds4::mapped_files
