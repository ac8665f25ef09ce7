// gguf/safetensors_writer.h — write a safetensors file (format: huggingface/safetensors; see
// safetensors.h): the 8-byte header length, the JSON header padded with spaces to a multiple of 8
// (as the reference writer does), then the tensors back to back in the order given.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "gguf/safetensors.h"

namespace ds4::gguf {

/// One tensor to write: `nbytes` bytes at `data` (product(shape) x dtype size, checked).
struct StWriteTensor {
  std::string name;
  StDtype dtype = StDtype::U8;
  std::vector<int64_t> shape;  // torch order
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

/// The header JSON for `tensors` laid out back to back from data offset 0 (key order: as
/// given; `__metadata__` first when `metadata` is not empty), unpadded.
std::string safetensors_header(const std::vector<StWriteTensor>& tensors, const std::map<std::string, std::string>& metadata);

/// Writes `path`. Errors: a tensor whose nbytes differs from its shape x dtype, a duplicate name,
/// or a failed write (naming the file).
Result<void> write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace ds4::gguf
