// staging/nvme_reader.h — reads byte ranges of model files (expert slices) with io_uring and
// O_DIRECT, or a pread thread pool where io_uring is unavailable.
//
// Every request is cut into aligned covering reads ("pieces") of at most `buffer_bytes` into
// aligned bounce buffers; the caller receives sub-views of those buffers. A probe at open chooses
// the backend and says why: io_uring with registered (fixed) buffers, plain io_uring, or the
// pread pool. At run time EAGAIN/ENOMEM/EINTR completions are resubmitted with backoff, and after
// repeated failures the piece is finished with pread, so no request is lost; O_DIRECT refused
// with EINVAL (at open or on a read) switches that file to buffered reads, counted.
// Not thread-safe: one thread calls read() at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "staging/staging_counters.h"

namespace ds4::staging {

/// Backend chosen by the probe.
enum class ReaderBackend { UringFixed, Uring, PreadPool };
/// "io_uring+fixed-buffers", "io_uring", "pread-pool".
const char* reader_backend_name(ReaderBackend b);

/// Reader configuration. Fault-injection switches exist for tests and diagnosis.
struct ReaderOptions {
  int queue_depth = 32;                     // reads in flight (= bounce buffers)
  uint64_t buffer_bytes = uint64_t(4) << 20;// bytes per aligned bounce buffer (multiple of alignment)
  uint32_t alignment = 4096;                // O_DIRECT offset/length/buffer alignment
  int pread_threads = 4;                    // workers of the pread pool backend
  bool direct = true;                       // open with O_DIRECT (fallback to buffered on EINVAL)
  bool disable_uring = false;               // fault injection: io_uring unavailable -> pread pool
  bool disable_fixed_buffers = false;       // do not register buffers (plain io_uring)
  bool inject_direct_einval = false;        // fault injection: every O_DIRECT read fails with EINVAL
  int inject_eagain_every = 0;              // fault injection: every n-th completion becomes -EAGAIN
};

/// Applies the diagnostic environment variables (read here only): DS4_DISABLE_IO_URING=1 sets
/// disable_uring, DS4_DISABLE_FIXED_BUFFERS=1 sets disable_fixed_buffers, DS4_NO_O_DIRECT=1
/// clears direct, DS4_INJECT_O_DIRECT_EINVAL=1 sets inject_direct_einval.
void apply_reader_env(ReaderOptions* opts);

/// One byte range of file `file` (index into the paths given to open()).
struct ReadRequest {
  int file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// Called on the reading thread for each delivered part of a request: request index, byte offset
/// of this part within the request, a view of `n` bytes valid only during the call.
using ReadCallback = std::function<void(size_t req, uint64_t req_off, const uint8_t* data, uint64_t n)>;

class NvmeReader {
 public:
  /// Opens `paths` (O_DIRECT where allowed and requested) and probes the backend. Error when a
  /// file cannot be opened or the options are invalid (queue_depth < 1, buffer_bytes not a
  /// positive multiple of alignment, alignment not a power of two).
  static Result<std::unique_ptr<NvmeReader>> open(const std::vector<std::string>& paths,
                                                  const ReaderOptions& opts);
  ~NvmeReader();

  ReaderBackend backend() const;
  /// Why the probe chose backend() (one line).
  const std::string& backend_reason() const;
  /// Size of file `file` in bytes.
  uint64_t file_size(int file) const;
  /// Whether file `file` is currently read with O_DIRECT.
  bool file_direct(int file) const;

  /// Reads all requests, calling `cb` for every part (in completion order). Error (after all
  /// in-flight reads have finished) when a request is outside its file or a read fails with an
  /// error that is not retried; the message names the file and the offset.
  Result<void> read(std::span<const ReadRequest> reqs, const ReadCallback& cb);
  /// Convenience: reads request i into dst[i] (length bytes).
  Result<void> read_into(std::span<const ReadRequest> reqs, std::span<uint8_t* const> dst);

  ReaderCounters counters() const;
  void reset_counters();

 private:
  NvmeReader();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::staging
