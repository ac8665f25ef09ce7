// common/ds4/oom_message.h — the text of an out-of-memory error: what failed, and how much memory
// the process held against which limit (Linux: /proc/self/status VmSize/VmRSS, RLIMIT_AS).
#pragma once

#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace ds4 {

/// "out of memory while WHAT (address space X MiB, resident Y MiB; limit Z MiB | no address-space
/// limit)". Allocates only a few hundred bytes (after a failed allocation, small ones usually work).
inline std::string out_of_memory_message(const std::string& what) {
  long vm_kib = -1, rss_kib = -1;
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "VmSize:", 7) == 0) vm_kib = std::strtol(line + 7, nullptr, 10);
      if (std::strncmp(line, "VmRSS:", 6) == 0) rss_kib = std::strtol(line + 6, nullptr, 10);
    }
    std::fclose(f);
  }
  std::string s = "out of memory while " + what;
  char buf[160];
  if (vm_kib >= 0 && rss_kib >= 0) {
    std::snprintf(buf, sizeof buf, " (address space %ld MiB, resident %ld MiB", vm_kib / 1024, rss_kib / 1024);
    s += buf;
    rlimit rl{};
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      std::snprintf(buf, sizeof buf, "; address-space limit %llu MiB)", (unsigned long long)(rl.rlim_cur >> 20));
      s += buf;
    } else {
      s += "; no address-space limit: physical memory or overcommit ran out)";
    }
  }
  return s;
}

}  // namespace ds4
