// gguf/gguf_validate.h — the checks GgufModel::open applies, their limits, and the optional deep
// (data) checks used by `ds4-offload inspect --validate`.
//
// Checks on open (each fails with its own message naming the file, key or tensor, expected vs found):
//  - magic "GGUF"; version 3 (version 2 is accepted: its layout is identical and ggml loads it;
//    version 1 used 32-bit counts and is refused, as is any version > 3); a byte-swapped version
//    (version & 0xFFFF == 0) is reported as a big-endian file, which is refused.
//  - truncation anywhere (header, key/value pairs, tensor infos, padding, tensor data): "truncated".
//  - keys: non-empty, unique; value type ids 0..12; BOOL is 0 or 1; no ARRAY of ARRAY (ggml
//    rejects them); strings and arrays at most 2^30 bytes / elements (ggml's limit).
//  - general.alignment: UINT32, non-zero power of two (absent: 32).
//  - tensor infos: name < 64 bytes (ggml GGML_MAX_NAME 64 incl. NUL), unique; n_dims <= 4; every
//    ne <= INT64_MAX; type id known to upstream ggml (fork-only ids are named as such); ne[0] a
//    multiple of the block size; element and byte counts fit in 64 bits.
//  - data: offsets multiples of the alignment; regions inside the file and not overlapping
//    (each region at least nbytes(type, ne)). Readers may accept any aligned offset; ggml itself
//    further requires offsets to equal the running padded sum (our writer follows that).
//  - split sets: every shard present (all missing shards named in one error), split.no / split.count
//    / split.tensors.count consistent, no tensor name in two shards, and every shard using the same
//    alignment. The last rule refuses sets written by gguf-py's GGUFWriter with a custom alignment:
//    it writes general.alignment into the first shard only while padding every shard to it, so the
//    later shards' data cannot be located from their own headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "gguf/gguf_file.h"

namespace ds4::gguf {

/// Longest string (bytes) and array (elements) accepted (ggml src/gguf.cpp: 2^30).
inline constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxArrayElems = uint64_t{1} << 30;
/// Tensor names must be shorter than this many bytes (ggml GGML_MAX_NAME, NUL included).
inline constexpr uint64_t kMaxTensorNameBytes = 64;
/// Most tensor dimensions (GGML_MAX_DIMS).
inline constexpr uint32_t kMaxDims = 4;
/// Default data alignment (GGUF_DEFAULT_ALIGNMENT).
inline constexpr uint32_t kDefaultAlignment = 32;

/// Result of a deep data check of one tensor.
struct DataCheck {
  uint64_t blocks_checked = 0;
  uint64_t bad = 0;          // blocks (or elements for float types) that failed
  uint64_t first_bad = 0;    // index of the first bad block / element
  std::string problem;       // e.g. "E8M0 scale 0xFF (NaN)"; empty when bad == 0
  bool checked = false;      // false: no deep check exists for this type
};

/// Scans the data of `t` (must be mapped): for block types with an FP16 scale (Q4_0..Q8_1, K
/// quants, IQ types with a `d` field, TQ types) the scale(s) must be finite; MXFP4 E8M0 scales must
/// not be 0xFF (NaN); F16/BF16/F32/F64 values must be finite. Scale positions from ggml
/// src/ggml-common.h block structs. Reads every byte of the tensor.
DataCheck check_tensor_data(const TensorInfo& t);

}  // namespace ds4::gguf
