// common/ds4/file_io.h — bounded input files and all-or-nothing output files, used by every
// reader of text/JSON inputs (prompts, token ids, hardware profiles, routing statistics, plans,
// model configs) and every writer of result files.
//
// Inputs: a path must name a regular file (a FIFO, device, socket or directory is refused before
// it is opened, so `-f /dev/zero` or a named pipe cannot block or stream forever) and hold at most
// `max_bytes`; the limit is named in the error. "-" (when allowed) reads standard input, stopping
// at max_bytes + 1 so an endless stream is refused too.
// Outputs: written to "<path>.tmp.<pid>" and renamed over `path` only after every byte was
// written and the file closed without error, so a failed write (full disk) leaves no partial or
// empty file at the final path (POSIX rename(2) replaces atomically within one file system).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "ds4/result.h"

namespace ds4 {

/// Size limits of the text and JSON inputs (bytes). Each is far above what a legitimate input
/// needs (noted) and far below what would exhaust memory once parsed: tokenizing text peaks at
/// about 10x its size (measured: 64 MiB of English, `run -f`, 0.65 GiB max RSS).
inline constexpr uint64_t kMaxPromptBytes = uint64_t{16} << 20;  // prompt text, token ids (a 1M-token context ~ 5 MiB)
inline constexpr uint64_t kMaxCorpusBytes = uint64_t{64} << 20;  // perplexity / calibration text (wikitext-2: 1.3 MB)
/// JSON is parsed into a DOM of ~16 bytes per value, so its limit is lower: the worst case, a
/// 64 MiB array of one-digit numbers, peaks at 1.07 GiB RSS in `plan --stats` (measured); the largest legitimate file, routing statistics with 65,536 routes per
/// layer of DeepSeek-V4-Flash (43 layers x top-6), is about 40 MiB.
inline constexpr uint64_t kMaxJsonBytes = uint64_t{64} << 20;

/// "64 MiB", "512 KiB", "100 bytes": a limit as written in errors.
inline std::string byte_limit_str(uint64_t b) {
  if (b >= (uint64_t{1} << 20) && b % (uint64_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " bytes";
}

/// What kind of file `st` describes, for "expected a regular file, found ...".
inline const char* file_kind(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

/// Error unless `path` exists and is a regular file (checked with stat(2), before any open, so a
/// FIFO cannot block). `what` names the input in the message: "<what> '<path>': ...".
inline Result<void> check_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Error{what + " '" + path + "': file not found"};
    return Error{what + " '" + path + "': cannot stat (" + std::strerror(errno) + ")"};
  }
  if (!S_ISREG(st.st_mode)) return Error{what + " '" + path + "': expected a regular file, found " + file_kind(st)};
  return ok();
}

/// Reads all of `path` (binary) if it is a regular file of at most `max_bytes`; with
/// `allow_stdin`, "-" reads standard input and a pipe (FIFO, `<(cmd)`) is read, both up to the
/// same limit (a FIFO without a writer reads as empty). Errors name `what`, the path and
/// the limit: "<what> '<path>': file is N bytes, more than the limit of 64 MiB".
inline Result<std::string> read_file_bounded(const std::string& path, uint64_t max_bytes, const std::string& what,
                                             bool allow_stdin = false) {
  int fd = -1;
  const bool is_stdin = allow_stdin && path == "-";
  // "<what> '-' (standard input)" or "<what> '<path>'", in the read errors.
  const std::string label = what + " '" + (is_stdin ? std::string("-' (standard input)") : path + "'");
  struct stat pst {};
  // With allow_stdin, a pipe is read like standard input (`-f <(cmd)`, /dev/fd/N): opened without
  // blocking (a FIFO with no writer reads as empty instead of hanging), then read to the limit.
  const bool is_pipe = allow_stdin && !is_stdin && ::stat(path.c_str(), &pst) == 0 && S_ISFIFO(pst.st_mode);
  if (is_stdin) {
    fd = 0;
  } else if (is_pipe) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return Error{what + " '" + path + "': cannot open (" + std::strerror(errno) + ")"};
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  } else {
    DS4_TRY_VOID(check_regular_file(path, what));
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return Error{what + " '" + path + "': cannot open (" + std::strerror(errno) + ")"};
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Error{what + " '" + path + "': expected a regular file"};
    }
    if (uint64_t(st.st_size) > max_bytes) {
      ::close(fd);
      return Error{what + " '" + path + "': file is " + std::to_string(uint64_t(st.st_size)) +
                   " bytes, more than the limit of " + byte_limit_str(max_bytes)};
    }
  }
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      if (!is_stdin) ::close(fd);
      return Error{label + ": read failed (" + std::strerror(e) + ")"};
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) {
      if (!is_stdin) ::close(fd);
      return Error{label + ": more than the limit of " +
                   byte_limit_str(max_bytes) + " (the input does not end)"};
    }
    out.append(buf, size_t(n));
  }
  if (!is_stdin) ::close(fd);
  return out;
}

/// An output file written all-or-nothing: bytes go to "<path>.tmp.<pid>"; commit() closes it and
/// renames it over `path` ("-" = standard output, written directly and flushed at commit); an uncommitted file is removed by the destructor. `what` names the
/// option in errors ("--logits-out 'x.f32': write failed (No space left on device)").
class AtomicOutputFile {
 public:
  AtomicOutputFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {}
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;
  ~AtomicOutputFile() {
    if (f_ && f_ != stdout) std::fclose(f_);
    if (!tmp_.empty() && !committed_) ::unlink(tmp_.c_str());
  }

  /// Creates the temporary file. Error when its folder is missing or not writable. An existing
  /// path that is not a regular file (/dev/null, /dev/stdout, a FIFO) is written directly.
  Result<void> open() {
    if (path_ == "-") {  // standard output, written directly
      tmp_.clear();
      f_ = stdout;
      return ok();
    }
    struct stat st {};
    const bool direct = ::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
    if (direct && S_ISDIR(st.st_mode)) return Error{what_ + ": expected a file path, found the directory '" + path_ + "'"};
    tmp_ = direct ? std::string() : path_ + ".tmp." + std::to_string(::getpid());
    f_ = std::fopen(direct ? path_.c_str() : tmp_.c_str(), "wb");
    if (!f_) {
      const int e = errno;
      tmp_.clear();
      return Error{what_ + " '" + path_ + "': cannot create (" + std::strerror(e) + ")"};
    }
    return ok();
  }
  /// Appends bytes; the first failure sticks and is reported by write() and commit().
  Result<void> write(const void* data, size_t n) {
    if (!f_) return Error{what_ + " '" + path_ + "': not open"};
    if (err_ == 0 && n > 0 && std::fwrite(data, 1, n, f_) != n) err_ = errno ? errno : EIO;
    if (err_) return Error{what_ + " '" + path_ + "': write failed (" + std::strerror(err_) + ")"};
    return ok();
  }
  Result<void> write(std::string_view s) { return write(s.data(), s.size()); }
  /// Flushes, closes and renames the file into place. Error (and no file at `path` changed) on
  /// any write, close or rename failure.
  Result<void> commit() {
    if (!f_) return Error{what_ + " '" + path_ + "': not open"};
    if (err_ == 0 && std::fflush(f_) != 0) err_ = errno ? errno : EIO;
    if (f_ == stdout) {
      if (err_ == 0 && std::ferror(f_)) err_ = EIO;
    } else if (std::fclose(f_) != 0 && err_ == 0) {
      err_ = errno ? errno : EIO;
    }
    f_ = nullptr;
    if (err_) return Error{what_ + " '" + path_ + "': write failed (" + std::strerror(err_) + ")"};
    if (tmp_.empty()) return ok();  // written directly (not a regular file)
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      return Error{what_ + " '" + path_ + "': cannot rename the finished file into place (" + std::strerror(errno) + ")"};
    committed_ = true;
    return ok();
  }

 private:
  std::string path_, what_, tmp_;
  std::FILE* f_ = nullptr;
  int err_ = 0;
  bool committed_ = false;
};

/// Writes `data` to `path` all-or-nothing (AtomicOutputFile).
inline Result<void> write_file_atomic(const std::string& path, std::string_view data, const std::string& what) {
  AtomicOutputFile f(path, what);
  DS4_TRY_VOID(f.open());
  DS4_TRY_VOID(f.write(data));
  return f.commit();
}

/// Flushes standard output; Error naming `what` when any write to it failed (e.g. `> /dev/full`).
inline Result<void> check_stdout(const std::string& what) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return Error{"writing " + what + " to standard output failed (" + std::string(std::strerror(errno ? errno : EIO)) + ")"};
  return ok();
}

}  // namespace ds4
