// fuzz/fuzz_input_file.h — the readers under test take paths: the fuzz input is written to an
// in-memory file (memfd) and read back through /proc/self/fd/N (a regular file).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ds4::fuzz {

/// One memfd reused by every iteration; path() names it.
class InputFile {
 public:
  InputFile() : fd_(::memfd_create("ds4-fuzz", 0)) {}
  ~InputFile() { ::close(fd_); }
  /// Replaces the contents with `data`; returns the path.
  std::string set(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) __builtin_trap();
    for (size_t off = 0; off < size;) {
      const ssize_t n = ::pwrite(fd_, data + off, size - off, static_cast<off_t>(off));
      if (n <= 0) __builtin_trap();
      off += size_t(n);
    }
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

}  // namespace ds4::fuzz
