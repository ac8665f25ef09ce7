// engine/cli/temp_cleanup.h — removes registered temporary files/folders when the process gets
// SIGINT or SIGTERM (Ctrl-C, `timeout`), then re-raises the signal so the exit status is the
// signal's. Normal exits clean up on their own (RAII in the caller); this covers the signal path.
// The handler is async-signal-safe: paths are copied into fixed slots at registration; a folder
// slot removes the folder's plain entries (one level, getdents64 + unlinkat) and then the folder.
#pragma once

#include <string>

namespace ds4::cli {

/// Registers `path` (a file, or with `is_dir` a folder whose entries are files) for removal on
/// SIGINT/SIGTERM and installs the handler on first use. Returns a slot for temp_cleanup_remove,
/// or -1 when all 8 slots are taken or the path is longer than 4095 bytes (then nothing is done).
int temp_cleanup_add(const std::string& path, bool is_dir);

/// Forgets slot `slot` (the caller removed the path itself); -1 is ignored.
void temp_cleanup_remove(int slot);

/// RAII registration: add at construction, remove at destruction.
class TempCleanupGuard {
 public:
  TempCleanupGuard(const std::string& path, bool is_dir) : slot_(temp_cleanup_add(path, is_dir)) {}
  ~TempCleanupGuard() { temp_cleanup_remove(slot_); }
  TempCleanupGuard(const TempCleanupGuard&) = delete;
  TempCleanupGuard& operator=(const TempCleanupGuard&) = delete;

 private:
  int slot_;
};

}  // namespace ds4::cli
