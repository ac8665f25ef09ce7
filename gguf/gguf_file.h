// gguf/gguf_file.h — read a GGUF v3 file or split set (mmap), validated on open.
//
// Layout source: ggml-org/ggml docs/gguf.md, src/gguf.cpp; split naming and keys from llama.cpp
// (llama_split_path, gguf-split). See ../shared/reference/quant-formats.md §1.
// Shapes are in ggml order: ne[0] is the innermost (contiguous) dimension, i.e. the row length.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ds4/result.h"
#include "gguf/gguf_value.h"

namespace ds4::gguf {

/// One tensor of a (possibly split) GGUF model.
struct TensorInfo {
  std::string name;
  uint32_t type = 0;                 // ggml type id (kernels/quant/ggml_type.h)
  int n_dims = 0;                    // 1..4
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ggml order; unused dims are 1
  uint64_t offset = 0;               // byte offset relative to its shard's data section
  uint64_t file_offset = 0;          // absolute byte offset in its shard file
  uint64_t nbytes = 0;               // nbytes(type, ne), validated against the file
  int shard = 0;                     // index into GgufModel::shards(); -1: bytes held in memory
                                     // (an assembled view's repacked tensor: no file location)
  const uint8_t* data = nullptr;     // mapped bytes (valid while the GgufModel lives)

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  /// Bytes of one row of ne[0] elements.
  uint64_t row_bytes() const;
  /// Number of rows (ne[1]*ne[2]*ne[3]).
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
};

/// One file of a set.
struct Shard {
  std::string path;
  uint64_t file_size = 0;
  uint32_t version = 0;
  uint32_t alignment = 32;
  uint64_t data_offset = 0;  // absolute start of the data section
  uint64_t n_tensors = 0;    // tensors stored in this shard
  Metadata metadata;         // this shard's own key/value pairs (shard 0's are the model's)
};

/// Open options.
struct OpenOptions {
  bool open_split_set = true;  // a NAME-0000k-of-0000n.gguf path opens all n shards
  bool map_data = true;        // mmap the files (false: header only; TensorInfo::data = nullptr)
};

/// A validated GGUF v3 model: one file or a split set opened from any of its shard names.
/// Metadata is shard 0's (later shards carry only split.* keys).
class GgufModel {
 public:
  /// Opens and validates `path`. Every structural problem is an Error naming the file, the tensor
  /// or key, and the expected versus found value (see gguf_validate.h for the list).
  static Result<GgufModel> open(const std::string& path, const OpenOptions& opts = {});

  GgufModel(GgufModel&&) noexcept;
  GgufModel& operator=(GgufModel&&) noexcept;
  ~GgufModel();

  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<Shard>& shards() const { return shards_; }
  /// Tensor by exact name, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  /// Path given to open().
  const std::string& path() const { return path_; }

  /// The Checkpoint view of another reader's files (DESIGN.md: name -> {type, shape, bytes}):
  /// llama.cpp names, `deepseek4.*` metadata and tensors whose `data` points into `keep_alive`
  /// (e.g. a safetensors mmap, or buffers of repacked blocks; `shard` -1 for those). `shards`
  /// lists the source files (path and size only). Tensor names must be unique and every nbytes
  /// match its type and shape (programmer errors: the assembler builds them). A tensor whose bytes
  /// are not aligned for its type (tensor_data_alignment) is copied into aligned memory owned by
  /// the model and becomes an in-memory tensor (shard -1; the safetensors data section may start
  /// at any offset).
  static GgufModel assemble(std::string path, Metadata metadata, std::vector<Shard> shards,
                            std::vector<TensorInfo> tensors, std::vector<std::shared_ptr<const void>> keep_alive);
  /// True when some tensor has no file location (shard -1): the NVMe tier cannot read it.
  bool has_in_memory_tensors() const;

 private:
  GgufModel();
  struct Mapping;
  std::string path_;
  Metadata metadata_;
  std::vector<Shard> shards_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::unique_ptr<Mapping>> maps_;
  std::vector<std::shared_ptr<const void>> keep_alive_;  // assemble(): owners of the tensor bytes
  friend class GgufModelBuilder;
};

/// Split-set file name parts: `PREFIX-0000k-of-0000n.gguf` (k is 1-based, as in llama.cpp
/// llama_split_path and gguf-py SHARD_NAME_FORMAT).
struct SplitName {
  std::string prefix;  // path without the "-0000k-of-0000n.gguf" suffix
  int no = 0;          // 1-based shard number k
  int count = 0;       // n
};

/// Parses a split-set path; returns false when `path` does not end in -DDDDD-of-DDDDD.gguf.
bool parse_split_path(const std::string& path, SplitName* out);
/// Formats shard `no` (1-based) of `count`: "PREFIX-00002-of-00005.gguf".
std::string split_path(const std::string& prefix, int no, int count);

/// The byte alignment the kernels assume for tensor data of ggml type `type`: the lowest set bit of
/// its block size, at most 8 (F32/I32 4, F16/BF16 and Q8_0 2, MXFP4 and FP8 1); 1 for an unknown id.
/// GgufModel::assemble copies tensors whose bytes are not so aligned (GGUF files align to 32).
uint64_t tensor_data_alignment(uint32_t type);

/// nbytes(type, ne) with overflow checks: Error if the type id is unknown (naming fork uses),
/// ne[0] is not a multiple of the block size, a dimension is negative, or the count overflows.
Result<uint64_t> tensor_nbytes(uint32_t type, const std::array<int64_t, 4>& ne);

}  // namespace ds4::gguf
