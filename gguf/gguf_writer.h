// gguf/gguf_writer.h — write GGUF v3 files that ggml accepts: tensor offsets equal the running
// sum of sizes padded to the alignment (ggml src/gguf.cpp is stricter than the spec here).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "gguf/gguf_value.h"

namespace ds4::gguf {

/// Collects metadata and tensors, then writes one file or a split set.
class GgufWriter {
 public:
  /// Alignment of tensor data (power of two; default 32). Written as `general.alignment` (UINT32)
  /// only when it differs from 32 — and then into every shard of a split set.
  void set_alignment(uint32_t alignment);
  Metadata& metadata() { return metadata_; }
  /// Adds a tensor; `ne` in ggml order, `data` must hold exactly nbytes(type, ne) bytes (copied).
  Result<void> add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& ne,
                          const void* data, uint64_t nbytes);
  /// Adds an all-zero tensor without holding its bytes: the writer leaves a hole in the file
  /// (ftruncate), so a sparse file with tensors above 4 GiB costs no disk or memory.
  Result<void> add_tensor_zero(const std::string& name, uint32_t type, const std::vector<int64_t>& ne);
  /// Produces a deferred tensor's bytes into `dst` (exactly its nbytes) while the file is written.
  using Fill = std::function<Result<void>(uint8_t* dst)>;
  /// Adds a tensor whose bytes `fill` produces at write time, one tensor at a time into a buffer
  /// the writer reuses, sized once for the largest deferred tensor (a streaming conversion holds
  /// one tensor, not the model; peak memory = the largest tensor). A fill error
  /// aborts the write (no file is left at the path).
  Result<void> add_tensor_deferred(const std::string& name, uint32_t type, const std::vector<int64_t>& ne, Fill fill);
  /// Called after each tensor's bytes are written: (tensor index, bytes of tensor data written so
  /// far, total bytes of tensor data).
  using Progress = std::function<void(size_t tensor, uint64_t done, uint64_t total)>;
  /// Writes a single file (`progress` optional).
  Result<void> write(const std::string& path, const Progress& progress = {}) const;
  /// Writes `PREFIX-0000k-of-0000n.gguf` shards with at most `max_tensors` tensors each, with
  /// split.no (UINT16), split.count (UINT16), split.tensors.count (INT32); model metadata in
  /// shard 0 only. Returns the shard paths.
  Result<std::vector<std::string>> write_split(const std::string& prefix, size_t max_tensors) const;

 private:
  struct Pending {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;  // empty for a zero or deferred tensor
    uint64_t nbytes = 0;
    bool zero = false;
    Fill fill;  // deferred: produces the bytes at write time
  };
  Result<void> add_pending(Pending p, const void* data, uint64_t nbytes);
  Result<void> write_one(const std::string& path, const Metadata& kv, const std::vector<const Pending*>& tensors,
                         const Progress& progress = {}) const;
  uint32_t alignment_ = 32;
  Metadata metadata_;
  std::vector<Pending> tensors_;
};

}  // namespace ds4::gguf
