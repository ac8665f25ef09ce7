// gguf/safetensors.h — read safetensors checkpoints (mmap), validated on open: a single
// `.safetensors` file, a sharded checkpoint through `model.safetensors.index.json`, or a folder
// holding `config.json` and that index (or one `model.safetensors`).
//
// Format (huggingface/safetensors, docs "safetensors" format section): an 8-byte little-endian u64
// N, then N bytes of UTF-8 JSON: an object mapping tensor name -> {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets relative to the byte after the header) plus an optional "__metadata__"
// object of string -> string. Tensors are row-major (C order, the LAST dimension contiguous), so a
// torch shape [out, in] is ggml {in, out}. The index file (transformers' sharded checkpoints) is
// {"metadata": {...}, "weight_map": {tensor name -> shard file name}}.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ds4/result.h"

namespace ds4::gguf {

/// Safetensors element types (the spec's dtype strings). F8_E4M3 is e4m3fn (no inf, 0x7F/0xFF NaN),
/// F8_E8M0 an unsigned power-of-two exponent 2^(e-127).
enum class StDtype : uint8_t {
  BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E4M3, F8_E5M2, F8_E8M0,
};

/// The dtype's spelling in a header ("F8_E4M3").
std::string_view st_dtype_name(StDtype t);
/// Bytes per element.
int st_dtype_bytes(StDtype t);
/// Parses a header dtype string; false when it is not one of the spec's names above.
bool parse_st_dtype(std::string_view s, StDtype* out);

/// Upper bound of a header's JSON length (the reference implementation's MAX_HEADER_SIZE, 100 MB):
/// a longer header is refused before any allocation.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

/// One tensor of a safetensors checkpoint.
struct StTensor {
  std::string name;
  StDtype dtype = StDtype::U8;
  std::vector<int64_t> shape;        // torch order: shape.back() is contiguous; [] = scalar
  uint64_t nbytes = 0;               // product(shape) * dtype bytes, checked against data_offsets
  uint64_t file_offset = 0;          // absolute byte offset in its shard file
  int shard = 0;                     // index into SafetensorsCheckpoint::shards()
  const uint8_t* data = nullptr;     // mapped bytes (valid while the checkpoint lives)

  int64_t nelements() const;
};

/// One `.safetensors` file of a checkpoint.
struct StShard {
  std::string path;
  uint64_t file_size = 0;
  uint64_t header_size = 0;                       // N, the JSON length
  std::map<std::string, std::string> metadata;    // "__metadata__"
};

/// Parses and validates one safetensors file already in memory (`bytes` = the whole file; `path`
/// names it in errors). Tensors are returned in header order with file_offset set and data
/// pointing into `bytes`. Errors, one message each naming the file (and the tensor): file shorter
/// than 8 bytes; header length N beyond the file or above kMaxSafetensorsHeader; header JSON
/// malformed (with the byte position), nested deeper than 64, or not an object; an entry not an
/// object or without dtype/shape/data_offsets; unknown dtype; shape entries not non-negative
/// integers or their product overflowing; data_offsets not two integers, begin > end (out of
/// order), end beyond the file (outside), end - begin != product(shape) x dtype size, two tensors
/// overlapping, or a hole between tensors; `__metadata__` not an object of strings.
Result<std::vector<StTensor>> parse_safetensors(const uint8_t* bytes, uint64_t size, const std::string& path,
                                                StShard* shard);

/// A validated, mmapped safetensors checkpoint: one file or all shards of an index.
class SafetensorsCheckpoint {
 public:
  /// Opens `path`: a `.safetensors` file, a `*.safetensors.index.json`, or a folder (its
  /// `model.safetensors.index.json`, else its single `model.safetensors`). Besides every per-file
  /// check of parse_safetensors: index JSON malformed or without a `weight_map` object of strings,
  /// a shard named in the index but missing, a tensor in the index but not in its shard, a tensor
  /// in a shard but not in the index (or indexed to another shard), the same name in two shards.
  static Result<SafetensorsCheckpoint> open(const std::string& path);

  SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) noexcept;
  ~SafetensorsCheckpoint();

  const std::vector<StTensor>& tensors() const { return tensors_; }
  const std::vector<StShard>& shards() const { return shards_; }
  /// Tensor by exact name, or nullptr.
  const StTensor* find(std::string_view name) const;
  /// The folder holding the shards (config.json, tokenizer.json live there).
  const std::string& folder() const { return folder_; }
  /// Path given to open().
  const std::string& path() const { return path_; }
  /// Total tensor bytes.
  uint64_t total_bytes() const;

 private:
  SafetensorsCheckpoint();
  struct Mapping;
  std::string path_, folder_;
  std::vector<StShard> shards_;
  std::vector<StTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::unique_ptr<Mapping>> maps_;
};

/// True when `path` names something SafetensorsCheckpoint::open reads (a .safetensors file, an
/// index json, or a folder with an index or model.safetensors); false for GGUF files and others.
bool is_safetensors_path(const std::string& path);

}  // namespace ds4::gguf
