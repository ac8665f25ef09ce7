// kernels/quant/deepseek_formats.h — DeepSeek-V4-Flash safetensors weight encodings (not ggml
// types). Sources: ggml-org/llama.cpp conversion/deepseek.py (DeepseekV4Model), antirez/ds4
// gguf-tools/deepseek4-quantize.c; summary in shared/reference/quant-formats.md §3.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/quant/scalar_formats.h"

namespace ds4::quant {

/// DeepSeek checkpoint encodings. Own enum: these have no ggml id.
enum class DsFormat : uint8_t {
  /// `<p>.weight` F8_E4M3 [out, in] + `<p>.scale` F8_E8M0 [ceil(out/128), ceil(in/128)]:
  /// x[r][k] = e4m3(w[r][k]) * 2^(scale[r/128][k/128] - 127).
  FP8_E4M3_B128 = 1,
  /// experts `w{1,2,3}.weight` stored as I8 bytes [out, in/2] + `<p>.scale` F8_E8M0 [out, in/32]:
  /// byte j low nibble = element 2j, high nibble = element 2j+1; x = e2m1(nib) * 2^(e-127).
  FP4_E2M1_B32 = 2,
};

/// Geometry of a DeepSeek encoding: elements per scale along a row (ne0) and along columns.
struct DsFormatInfo {
  DsFormat format;
  std::string_view name;
  int scale_block_cols;  ///< elements along ne0 sharing one scale
  int scale_block_rows;  ///< rows sharing one scale
  int elems_per_byte;    ///< 1 for FP8, 2 for FP4
};

inline constexpr DsFormatInfo kDsFormats[] = {
    {DsFormat::FP8_E4M3_B128, "FP8_E4M3_B128", 128, 128, 1},
    {DsFormat::FP4_E2M1_B32, "FP4_E2M1_B32", 32, 1, 2},
};

/// Element k of a DeepSeek FP8 row with its block's E8M0 scale byte.
DS4_HD inline float ds_fp8_value(uint8_t w, uint8_t e8m0) { return e4m3_to_f32(w) * e8m0_to_f32(e8m0); }

/// E2M1 code of element k of a DeepSeek FP4 row (low nibble = even element).
DS4_HD inline uint8_t ds_fp4_code(const uint8_t* row, int64_t k) {
  return uint8_t((row[k / 2] >> (4 * (k & 1))) & 0xF);
}

/// Element value of a DeepSeek FP4 code with its E8M0 scale byte (code 8 gives -0).
DS4_HD inline float ds_fp4_value(uint8_t code, uint8_t e8m0) { return e2m1_to_f32(code) * e8m0_to_f32(e8m0); }

}  // namespace ds4::quant
