// kernels/quant/type_traits.h — one table of every tensor encoding this project handles: ggml
// types (id, geometry, CPU reference decode/quantize/dot) and the DeepSeek safetensors encodings.
// Geometry comes from ggml_type.h; the function pointers are the scalar reference kernels of
// kernels/cpu (quant_ref.h); the CUDA side uses the DS4_HD functions in decode.h / dot_q8_1.h.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/quant/deepseek_formats.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::quant {

/// Reference kernels and geometry of one ggml type.
struct QuantTypeTraits {
  GgmlType type;
  std::string_view name;  ///< ggml name ("IQ2_XXS")
  uint32_t ggml_id;
  int64_t block_elems;
  int64_t block_bytes;
  /// Decodes one block (any alignment) to block_elems floats (I32: float(v), exact for |v| <= 2^24).
  void (*decode)(const void* block, float* y);
  /// Encodes a row of n floats (n % block_elems == 0); nullptr when not supported.
  void (*quantize)(const float* x, void* dst, int64_t n);
  /// Dot of a weight row of n elements with n/32 Q8_1 blocks (dot_q8_1.h); nullptr when none.
  float (*dot_q8_1)(const void* w_row, const void* act, int64_t n);
};

/// All entries: F32, F16, BF16, I32, Q4_0, Q8_0, Q8_1, Q8_K, Q2_K, Q4_K, Q6_K, IQ2_XXS, IQ2_XS,
/// IQ2_S, IQ1_S, IQ1_M, MXFP4, NVFP4.
std::span<const QuantTypeTraits> all_quant_type_traits();

/// Traits of `type`, or nullptr when this project does not handle it.
const QuantTypeTraits* quant_type_traits(GgmlType type);

/// Reference decode of one DeepSeek encoding.
struct DsFormatTraits {
  DsFormatInfo info;
  /// Decodes one row of n elements given the row's scale bytes (see quant_ref.h).
  void (*decode_row)(const uint8_t* w_row, const uint8_t* scale_row, float* dst, int64_t n);
};

/// Traits of a DeepSeek encoding (always non-null for a valid enum value).
const DsFormatTraits* ds_format_traits(DsFormat f);

}  // namespace ds4::quant
