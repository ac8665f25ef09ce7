// kernels/cuda/ops/matmul/decode_unit.cuh — exact decode of one "unit" of a weight row on the
// device (kernels/quant/decode.h, DS4_HD): a 32-element block or 32-element group of a
// 256-element super-block, a 64-element NVFP4 / NVFP4_S2 block, a 128-element F8_E4M3_R128 block,
// a 256-element Q8_K block, or 32 F32 / F16 / BF16 values. The values equal the CPU's
// cpu::dequantize_row bit for bit (the same DS4_HD decoders).
#pragma once

#include <cstdint>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/ggml_type.h"
#include "kernels/quant/scalar_formats.h"

namespace ds4::cuda {

/// Unit length of `t` (see ops_cuda_matmul.h decode_unit_elems); 0 = no decoder.
DS4_HD inline int unit_elems_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q8_0:
    case GgmlType::Q8_1: case GgmlType::Q2_K: case GgmlType::Q4_K: case GgmlType::Q6_K: case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::MXFP4:
      return 32;
    case GgmlType::NVFP4: case GgmlType::NVFP4_S2: return 64;
    case GgmlType::F8_E4M3_R128: return 128;
    case GgmlType::Q8_K: return 256;
    default: return 0;
  }
}

namespace detail {
template <class B>
DS4_HD inline const B& blk(const uint8_t* row, int64_t i) {
  return *reinterpret_cast<const B*>(row + i * int64_t(sizeof(B)));
}
}  // namespace detail

/// Decodes unit `u` of the weight row at `row` (type `t`) into y[unit_elems_of(t)].
DS4_HD inline void decode_unit(GgmlType t, const uint8_t* row, int64_t u, float* y) {
  using namespace ds4::quant;
  using detail::blk;
  switch (t) {
    case GgmlType::F32: {
      const float* p = reinterpret_cast<const float*>(row) + 32 * u;
      for (int j = 0; j < 32; ++j) y[j] = p[j];
      return;
    }
    case GgmlType::F16: {
      const uint8_t* p = row + 64 * u;
      for (int j = 0; j < 32; ++j) y[j] = fp16_to_f32(uint16_t(p[2 * j] | (p[2 * j + 1] << 8)));
      return;
    }
    case GgmlType::BF16: {
      const uint8_t* p = row + 64 * u;
      for (int j = 0; j < 32; ++j) y[j] = bf16_to_f32(uint16_t(p[2 * j] | (p[2 * j + 1] << 8)));
      return;
    }
    case GgmlType::Q4_0: return decode_q4_0(blk<BlockQ4_0>(row, u), y);
    case GgmlType::Q8_0: return decode_q8_0(blk<BlockQ8_0>(row, u), y);
    case GgmlType::Q8_1: return decode_q8_1(blk<BlockQ8_1>(row, u), y);
    case GgmlType::Q8_K: return decode_q8_k(blk<BlockQ8_K>(row, u), y);
    case GgmlType::Q2_K: return decode_q2_k_group(blk<BlockQ2_K>(row, u / 8), int(u % 8), y);
    case GgmlType::Q4_K: return decode_q4_k_group(blk<BlockQ4_K>(row, u / 8), int(u % 8), y);
    case GgmlType::Q6_K: return decode_q6_k_group(blk<BlockQ6_K>(row, u / 8), int(u % 8), y);
    case GgmlType::IQ2_XXS: return decode_iq2_xxs_group(blk<BlockIQ2_XXS>(row, u / 8), int(u % 8), y);
    case GgmlType::IQ2_XS: return decode_iq2_xs_group(blk<BlockIQ2_XS>(row, u / 8), int(u % 8), y);
    case GgmlType::IQ2_S: return decode_iq2_s_group(blk<BlockIQ2_S>(row, u / 8), int(u % 8), y);
    case GgmlType::IQ1_S: return decode_iq1_s_group(blk<BlockIQ1_S>(row, u / 8), int(u % 8), y);
    case GgmlType::IQ1_M: return decode_iq1_m_group(blk<BlockIQ1_M>(row, u / 8), int(u % 8), y);
    case GgmlType::MXFP4: return decode_mxfp4(blk<BlockMXFP4>(row, u), y);
    case GgmlType::NVFP4: return decode_nvfp4(blk<BlockNVFP4>(row, u), y);
    case GgmlType::NVFP4_S2: return decode_nvfp4_s2(blk<BlockNVFP4S2>(row, u), y);
    case GgmlType::F8_E4M3_R128: return decode_f8_r128(blk<BlockF8R128>(row, u), y);
    default: return;
  }
}

}  // namespace ds4::cuda
